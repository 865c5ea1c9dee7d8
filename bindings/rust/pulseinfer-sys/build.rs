//! Finds libpulseinfer and pulseinfer.h, links the library, and generates the FFI with bindgen.
//!
//! Where from, first found wins:
//! 1. PULSEINFER_LIB_DIR and PULSEINFER_INCLUDE_DIR (either alone takes the other's in-tree
//!    default);
//! 2. the source tree this crate sits in: build/lib and capi/include;
//! 3. pkg-config's `pulseinfer` (an installed library).

use std::collections::BTreeSet;
use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use bindgen::callbacks::{IntKind, MacroParsingBehavior, ParseCallbacks};

const LIB_DIR_VAR: &str = "PULSEINFER_LIB_DIR";
const INCLUDE_DIR_VAR: &str = "PULSEINFER_INCLUDE_DIR";

/// The header's macros that are not values: the export attribute of its functions.
const NON_VALUE_MACROS: &[&str] = &["PULSE_API"];

/// The prefix of the constants the wrapper header declares for the macros bindgen cannot
/// evaluate; the generated items lose it again.
const MACRO_VALUE_PREFIX: &str = "pulse_macro_value_";

struct Library {
    lib_dir: PathBuf,
    include_dir: PathBuf,
}

fn main() {
    let library = find_library();
    let header = library.include_dir.join("pulseinfer").join("pulseinfer.h");
    if !header.is_file() {
        panic!(
            "{} does not exist; set {INCLUDE_DIR_VAR} to the directory holding \
             pulseinfer/pulseinfer.h",
            header.display()
        );
    }

    println!("cargo:rustc-link-search=native={}", library.lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=pulseinfer");
    // Read by dependents' build scripts as DEP_PULSEINFER_LIB_DIR (for an rpath) and
    // DEP_PULSEINFER_INCLUDE (to compile C against the header).
    println!("cargo:lib_dir={}", library.lib_dir.display());
    println!("cargo:include={}", library.include_dir.display());

    generate_bindings(&header);
}

fn find_library() -> Library {
    println!("cargo:rerun-if-env-changed={LIB_DIR_VAR}");
    println!("cargo:rerun-if-env-changed={INCLUDE_DIR_VAR}");
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let source_tree = Path::new(&manifest_dir).join("../../..");
    let source_tree = source_tree.canonicalize().unwrap_or(source_tree);
    let in_tree = Library {
        lib_dir: source_tree.join("build/lib"),
        include_dir: source_tree.join("capi/include"),
    };
    let from_env = |name: &str| env::var_os(name).map(PathBuf::from);
    match (from_env(LIB_DIR_VAR), from_env(INCLUDE_DIR_VAR)) {
        (None, None) if in_tree.lib_dir.join("libpulseinfer.so").exists() => in_tree,
        (None, None) => from_pkg_config(),
        (lib_dir, include_dir) => Library {
            lib_dir: lib_dir.unwrap_or(in_tree.lib_dir),
            include_dir: include_dir.unwrap_or(in_tree.include_dir),
        },
    }
}

fn from_pkg_config() -> Library {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let variable = |name: &str| -> PathBuf {
        let output = Command::new("pkg-config")
            .args(["--variable", name, "pulseinfer"])
            .output()
            .unwrap_or_else(|error| panic!("cannot run pkg-config: {error}"));
        let value = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if !output.status.success() || value.is_empty() {
            panic!(
                "libpulseinfer not found: set {LIB_DIR_VAR} and {INCLUDE_DIR_VAR}, build it in \
                 this source tree (scripts/build), or install it where pkg-config finds \
                 pulseinfer.pc ({})",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        PathBuf::from(value)
    };
    Library { lib_dir: variable("libdir"), include_dir: variable("includedir") }
}

/// Two passes: the first finds the `PULSE_*` macros bindgen's macro evaluator (cexpr) cannot
/// read, which are those with a cast such as `((uint64_t)1 << 0)`; the second parses a wrapper
/// header that also declares each of them as a typed constant, which clang evaluates.
fn generate_bindings(header: &Path) {
    let census = Arc::new(MacroCensus::default());
    generate(builder(header).parse_callbacks(Box::new(CensusCallbacks(Arc::clone(&census)))));

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut wrapper = format!("#include \"{}\"\n", header.display());
    for name in census.unevaluated() {
        writeln!(wrapper, "static const __typeof__({name}) {MACRO_VALUE_PREFIX}{name} = {name};")
            .expect("writing to a String cannot fail");
    }
    let wrapper_path = out.join("pulseinfer_wrapper.h");
    std::fs::write(&wrapper_path, wrapper)
        .unwrap_or_else(|error| panic!("cannot write {}: {error}", wrapper_path.display()));
    let bindings = generate(
        builder(&wrapper_path)
            .allowlist_var(format!("{MACRO_VALUE_PREFIX}.*"))
            .parse_callbacks(Box::new(OutputCallbacks { wrapper: wrapper_path.clone() })),
    );
    bindings
        .write_to_file(out.join("bindings.rs"))
        .unwrap_or_else(|error| panic!("cannot write the bindings: {error}"));
}

fn builder(header: &Path) -> bindgen::Builder {
    bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_function("pulse_.*")
        .allowlist_type("pulse_.*")
        .allowlist_var("PULSE_.*")
        // PULSE_OK rather than pulse_status_code_PULSE_OK.
        .prepend_enum_name(false)
        // PULSE_ABI_VERSION as an i32, the type of pulse_abi_version().
        .default_macro_constant_type(bindgen::MacroTypeVariation::Signed)
        .size_t_is_usize(true)
        // Zeroed structs for the *_init functions to fill.
        .derive_default(true)
}

fn generate(builder: bindgen::Builder) -> bindgen::Bindings {
    builder.generate().unwrap_or_else(|error| panic!("bindgen failed: {error}"))
}

#[derive(Debug, Default)]
struct MacroCensus {
    defined: Mutex<BTreeSet<String>>,
    evaluated: Mutex<BTreeSet<String>>,
}

impl MacroCensus {
    fn unevaluated(&self) -> Vec<String> {
        let defined = self.defined.lock().expect("no panic holds the lock");
        let evaluated = self.evaluated.lock().expect("no panic holds the lock");
        defined
            .difference(&evaluated)
            .filter(|name| name.starts_with("PULSE_") && !NON_VALUE_MACROS.contains(&name.as_str()))
            .cloned()
            .collect()
    }
}

#[derive(Debug)]
struct CensusCallbacks(Arc<MacroCensus>);

impl ParseCallbacks for CensusCallbacks {
    fn will_parse_macro(&self, name: &str) -> MacroParsingBehavior {
        self.0.defined.lock().expect("no panic holds the lock").insert(name.to_owned());
        MacroParsingBehavior::Default
    }

    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        self.0.evaluated.lock().expect("no panic holds the lock").insert(name.to_owned());
        None
    }
}

#[derive(Debug)]
struct OutputCallbacks {
    wrapper: PathBuf,
}

impl ParseCallbacks for OutputCallbacks {
    fn item_name(&self, name: &str) -> Option<String> {
        name.strip_prefix(MACRO_VALUE_PREFIX).map(str::to_owned)
    }

    fn include_file(&self, filename: &str) {
        // Regenerate when pulseinfer.h (or a header it includes) changes; the wrapper is ours.
        if Path::new(filename) != self.wrapper {
            println!("cargo:rerun-if-changed={filename}");
        }
    }
}
