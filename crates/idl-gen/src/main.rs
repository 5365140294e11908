//! `idl-gen [--check]`: builds the IDL of `programs/compute-market` with anchor-lang's
//! `idl-build` feature (as `anchor idl build` does) and writes `idl/compute_market.json`;
//! with `--check`, fails when the checked-in file differs.
use std::path::PathBuf;

fn main() {
    let check = std::env::args().any(|a| a == "--check");
    // the workspace is found from where it runs (`scripts/idl` runs it at the root), not from
    // where it was built: a cached build may come from another clone sharing the target dir
    let here = std::env::current_dir().expect("a current directory");
    let root = here
        .ancestors()
        .find(|d| d.join("programs/compute-market/Cargo.toml").is_file())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            eprintln!(
                "idl-gen: run it inside the workspace ({} is not)",
                here.display()
            );
            std::process::exit(2)
        });
    // a separate target dir: the IDL build uses its own RUSTFLAGS and features and must not
    // invalidate the normal host build
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    std::env::set_var("CARGO_TARGET_DIR", target.join("idl"));
    // anchor-lang-idl 0.1.4 turns a set RUSTUP_TOOLCHAIN into a literal `+{toolchain}` argument
    std::env::remove_var("RUSTUP_TOOLCHAIN");
    let idl = anchor_lang_idl::build::IdlBuilder::new()
        .program_path(root.join("programs/compute-market"))
        .skip_lint(true)
        .build()
        .unwrap_or_else(|e| {
            eprintln!("idl-gen: building the IDL failed: {e}");
            std::process::exit(2)
        });
    let json = serde_json::to_string_pretty(&idl).expect("serialize IDL") + "\n";
    let path = root.join("idl/compute_market.json");
    if check {
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current != json {
            eprintln!(
                "idl-gen: {} is stale; run scripts/idl and commit the result",
                path.display()
            );
            std::process::exit(1);
        }
        println!(
            "idl-gen: {} is up to date ({} instructions)",
            path.display(),
            idl.instructions.len()
        );
    } else {
        std::fs::create_dir_all(path.parent().unwrap()).expect("idl dir");
        std::fs::write(&path, json).expect("write IDL");
        println!(
            "idl-gen: wrote {} ({} instructions, {} events, {} errors)",
            path.display(),
            idl.instructions.len(),
            idl.events.len(),
            idl.errors.len()
        );
    }
}
