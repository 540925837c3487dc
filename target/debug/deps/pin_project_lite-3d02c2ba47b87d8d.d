/work/main/target/debug/deps/pin_project_lite-3d02c2ba47b87d8d.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/pin-project-lite-0.2.18/src/lib.rs

/work/main/target/debug/deps/libpin_project_lite-3d02c2ba47b87d8d.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/pin-project-lite-0.2.18/src/lib.rs

/work/main/target/debug/deps/libpin_project_lite-3d02c2ba47b87d8d.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/pin-project-lite-0.2.18/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/pin-project-lite-0.2.18/src/lib.rs:
