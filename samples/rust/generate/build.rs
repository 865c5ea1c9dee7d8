//! An rpath to libpulseinfer, found by pulseinfer-sys's build script, so that the program runs
//! without LD_LIBRARY_PATH.

fn main() {
    let lib_dir = std::env::var("DEP_PULSEINFER_LIB_DIR")
        .expect("pulseinfer-sys (links = \"pulseinfer\") exports lib_dir");
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{lib_dir}");
}
