//! Sets the `real_consul` cfg when the integration suite is built to run
//! against a real agent, so that tests needing the emulator show as ignored
//! there instead of passing without having checked anything.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LOCKRUN_TEST_CONSUL_ADDR");
    println!("cargo:rustc-check-cfg=cfg(real_consul)");
    let real = std::env::var("LOCKRUN_TEST_CONSUL_ADDR").is_ok_and(|a| !a.trim().is_empty());
    if real {
        println!("cargo:rustc-cfg=real_consul");
    }
}
