//! Backend selection: which device a keeper computes on. `auto` takes the GPUs when CUDA loads
//! and every device passes its self-test against the CPU, else the CPU, and logs the choice.

use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::{cpu::CpuBackend, cuda::CudaBackend, Backend};

/// Which backend a keeper uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// CUDA when a GPU passes its self-test, else the CPU (the choice is logged).
    Auto,
    /// The CPU reference.
    Cpu,
    /// CUDA, or an error saying why it cannot be used.
    Cuda,
}

/// The backend for `choice`.
pub fn select(choice: BackendChoice) -> Result<Arc<dyn Backend>> {
    match choice {
        BackendChoice::Cpu => Ok(Arc::new(CpuBackend)),
        BackendChoice::Cuda => Ok(CudaBackend::shared().context("--backend cuda")?),
        BackendChoice::Auto => match CudaBackend::shared() {
            Ok(b) => {
                tracing::info!(backend = b.name(), "--backend auto: using the GPU(s)");
                Ok(b)
            }
            Err(e) => {
                tracing::info!(reason = %format!("{e:#}"), "--backend auto: using the CPU");
                Ok(Arc::new(CpuBackend))
            }
        },
    }
}

impl std::str::FromStr for BackendChoice {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => BackendChoice::Auto,
            "cpu" => BackendChoice::Cpu,
            "cuda" => BackendChoice::Cuda,
            other => bail!("a backend is auto, cpu or cuda, not {other:?}"),
        })
    }
}
