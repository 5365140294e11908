//! Finding the CUDA libraries before cudarc does (it panics on a missing one): the driver,
//! and NVRTC by name or from the PyPI wheel by absolute path.

use super::*;

/// Where a pip-installed `nvidia-cuda-nvrtc-cu12` wheel puts `libnvrtc.so.12`.
pub(crate) fn wheel_candidates() -> Vec<PathBuf> {
    let mut out = vec![];
    if let Some(p) = std::env::var_os(NVRTC_ENV) {
        out.push(PathBuf::from(p));
    }
    let mut roots: Vec<PathBuf> = vec![];
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".local/lib"));
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        roots.push(PathBuf::from(venv).join("lib"));
    }
    roots.extend(["/usr/local/lib", "/usr/lib"].map(PathBuf::from));
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("python3") {
                for site in ["site-packages", "dist-packages"] {
                    out.push(
                        e.path()
                            .join(site)
                            .join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12"),
                    );
                }
            }
        }
    }
    out
}

/// Whether CUDA can be used here; `Err` says why not. Never panics, and touches no cudarc
/// function that would panic on a missing library.
pub fn probe() -> Result<(), String> {
    // SAFETY: only tries to open the library by name
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no NVIDIA driver: libcuda.so not found".into());
    }
    nvrtc_probe().map_err(|why| format!("the NVIDIA driver is present but {why}"))?;
    match CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(()),
        Ok(_) => Err("the NVIDIA driver reports no GPU".into()),
        Err(e) => Err(format!("cuInit failed: {e}")),
    }
}

/// Whether NVRTC can be used (it needs no GPU: kernels compile anywhere it is installed),
/// loading the `nvidia-cuda-nvrtc-cu12` wheel's library by absolute path when the system has
/// none; `Err` says why not.
pub fn nvrtc_probe() -> Result<(), String> {
    // SAFETY: only tries to open the library by name
    if !unsafe { nvrtc_sys::is_culib_present() } {
        let preloaded = NVRTC_PRELOAD.get_or_init(|| {
            wheel_candidates().into_iter().filter(|p| p.exists()).find_map(|p| {
                // SAFETY: loading NVIDIA's NVRTC, whose initialisers are sound
                let lib = unsafe { libloading::Library::new(&p) }.ok()?;
                tracing::info!(path = %p.display(), "loaded NVRTC from the nvidia-cuda-nvrtc-cu12 wheel");
                Some(lib)
            })
        });
        // SAFETY: as above; a preloaded library is found by its soname
        if preloaded.is_none() || !unsafe { nvrtc_sys::is_culib_present() } {
            return Err(format!(
                "NVRTC is not installed: install the CUDA toolkit's libnvrtc.so.12, or `pip install nvidia-cuda-nvrtc-cu12` (or set {NVRTC_ENV} to its libnvrtc.so.12)"
            ));
        }
    }
    Ok(())
}
