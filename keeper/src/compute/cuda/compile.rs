//! Compiling the kernels with NVRTC to a CUBIN for the device's architecture (exact
//! arithmetic options), cached on disk by (source hash, architecture, NVRTC version).

use super::*;

/// NVRTC's version (major, minor).
pub(crate) fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded ([`probe`]) and both pointers are valid
    unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| anyhow!("nvrtcVersion: {e:?}"))?;
    Ok((major, minor))
}

/// The kernel cache directory: `$COMPUTE_MARKET_KERNEL_CACHE`, else
/// `~/.cache/compute-market/kernels`.
pub fn kernel_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(CACHE_ENV) {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache/compute-market/kernels")
}

/// NVRTC options: exact arithmetic only, a CUBIN for `arch` (e.g. `sm_90`).
pub(crate) fn compile_options(arch: &str) -> Vec<String> {
    let opts = CompileOptions {
        fmad: Some(false),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        use_fast_math: Some(false),
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++14".into()],
        ..Default::default()
    };
    // CompileOptions::build is crate-private: mirror its order here
    let mut out = vec![];
    for (flag, v) in [
        ("--ftz", opts.ftz),
        ("--prec-sqrt", opts.prec_sqrt),
        ("--prec-div", opts.prec_div),
        ("--fmad", opts.fmad),
    ] {
        if let Some(v) = v {
            out.push(format!("{flag}={v}"));
        }
    }
    out.extend(opts.options);
    out
}

/// Compiles [`KERNELS`] to a CUBIN for `arch` (e.g. `sm_90`), or reads it from the disk
/// cache ([`kernel_cache_dir`]). Returns the CUBIN and whether it came from the cache.
pub fn cubin(arch: &str) -> Result<(Vec<u8>, bool)> {
    cubin_in(arch, &kernel_cache_dir())
}

/// [`cubin`] with the cache in `dir`. NVRTC must be present ([`nvrtc_probe`]).
pub fn cubin_in(arch: &str, dir: &std::path::Path) -> Result<(Vec<u8>, bool)> {
    nvrtc_probe().map_err(|why| anyhow!(why))?;
    let (major, minor) = nvrtc_version()?;
    let options = compile_options(arch);
    let key = hashv(&[
        b"cm:kernels:v1",
        KERNELS.as_bytes(),
        arch.as_bytes(),
        &major.to_le_bytes(),
        &minor.to_le_bytes(),
        options.join(" ").as_bytes(),
    ]);
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("{arch}-nvrtc{major}.{minor}-{}.cubin", &hex[..16]));
    if let Ok(bytes) = std::fs::read(&path) {
        if !bytes.is_empty() {
            return Ok((bytes, true));
        }
    }
    let src = std::ffi::CString::new(KERNELS).expect("no NUL in the source");
    let name = std::ffi::CString::new("kernels.cu").expect("no NUL");
    let prog = nvrtc_result::create_program(&src, Some(&name))
        .map_err(|e| anyhow!("nvrtcCreateProgram: {e:?}"))?;
    // SAFETY: `prog` is a live program; the options are plain strings
    let compiled = unsafe { nvrtc_result::compile_program(prog, &options) };
    let out = (|| -> Result<Vec<u8>> {
        if let Err(e) = compiled {
            // SAFETY: `prog` is live
            let log = unsafe { nvrtc_result::get_program_log(prog) }.unwrap_or_default();
            let log: Vec<u8> = log
                .iter()
                .map(|&c| c as u8)
                .take_while(|&c| c != 0)
                .collect();
            bail!(
                "NVRTC failed ({e:?}) with {options:?}:\n{}",
                String::from_utf8_lossy(&log)
            );
        }
        let mut size = 0usize;
        // SAFETY: `prog` compiled; `size` is a valid pointer
        unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) }
            .result()
            .map_err(|e| anyhow!("nvrtcGetCUBINSize: {e:?}"))?;
        ensure!(
            size > 0,
            "NVRTC produced no CUBIN for {arch} (is {arch} a real architecture?)"
        );
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` has the size NVRTC reported
        unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut _) }
            .result()
            .map_err(|e| anyhow!("nvrtcGetCUBIN: {e:?}"))?;
        Ok(buf)
    })();
    // SAFETY: destroyed once, after use
    let _ = unsafe { nvrtc_result::destroy_program(prog) };
    let bytes = out?;
    if std::fs::create_dir_all(dir).is_ok() {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok((bytes, false))
}
