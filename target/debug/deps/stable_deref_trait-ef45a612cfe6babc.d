/work/main/target/debug/deps/stable_deref_trait-ef45a612cfe6babc.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/stable_deref_trait-1.2.1/src/lib.rs

/work/main/target/debug/deps/libstable_deref_trait-ef45a612cfe6babc.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/stable_deref_trait-1.2.1/src/lib.rs

/work/main/target/debug/deps/libstable_deref_trait-ef45a612cfe6babc.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/stable_deref_trait-1.2.1/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/stable_deref_trait-1.2.1/src/lib.rs:
