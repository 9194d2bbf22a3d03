//! The `--device cpu|cuda|sim` argument of the training examples
//! (`train_mlp`, `train_cnn`, `char_lm`) and their comparison of the CPU
//! with the simulated GPU, and their `--autocast bf16|f16`. Not an example itself (a folder without
//! `main.rs`).

use tenjin::{DType, Device, Error};

/// The `--autocast bf16|f16` argument: the half type the forward runs
/// in under `tenjin::autocast` (`None` without it: f32). A message and
/// exit status 2 for anything else.
pub fn autocast_arg() -> Option<DType> {
    let args: Vec<String> = std::env::args().collect();
    let k = args.iter().position(|a| a == "--autocast")?;
    match args.get(k + 1).map(String::as_str) {
        Some("bf16") => Some(DType::BF16),
        Some("f16") => Some(DType::F16),
        other => {
            eprintln!("--autocast takes bf16 or f16, not {other:?}");
            std::process::exit(2);
        }
    }
}

/// Where `--device` asks the example to train.
pub enum Where {
    /// The CPU (no `--device`, or `--device cpu`).
    Cpu,
    /// A real GPU (`--device cuda`): CUDA device 0.
    Cuda,
    /// The simulated GPU (`--device sim`): a few steps, compared with the
    /// CPU's.
    Sim,
}

/// The `--device` argument; a message and exit status 2 for anything
/// else, and for `cuda` where no GPU is available.
pub fn from_args() -> Where {
    let args: Vec<String> = std::env::args().collect();
    let Some(k) = args.iter().position(|a| a == "--device") else {
        return Where::Cpu;
    };
    match args.get(k + 1).map(String::as_str) {
        Some("cpu") => Where::Cpu,
        Some("sim") => Where::Sim,
        Some("cuda") if tenjin::cuda::is_available() => Where::Cuda,
        Some("cuda") => {
            eprintln!(
                "--device cuda: no CUDA GPU is available (tenjin built without the `cuda` feature, \
                 or no driver or GPU found); --device sim runs the simulated GPU"
            );
            std::process::exit(2);
        }
        other => {
            eprintln!("--device takes cpu, cuda or sim, not {other:?}");
            std::process::exit(2);
        }
    }
}

/// Runs `steps` training steps with `run` (the losses) with every tensor
/// on the CPU, then on the simulated GPU, and compares the losses step by
/// step within the f32 tolerance (1e-4 relative); exits with status 1
/// when they differ or nothing ran on the device.
pub fn compare_on_simulated_gpu(
    steps: usize,
    run: impl Fn(Device) -> Result<Vec<f64>, Error>,
) -> Result<(), Error> {
    let on = |device: Device| {
        tenjin::set_default_device(device);
        run(device)
    };
    let cpu = on(tenjin::Device::Cpu)?;
    tenjin::cuda::simulate()?;
    let before = tenjin::stats();
    let sim = on(tenjin::Device::Cuda(0))?;
    tenjin::set_default_device(tenjin::Device::Cpu);
    let after = tenjin::stats();
    println!("step  loss (cpu)   loss (simulated gpu)");
    let mut bad = 0;
    for (k, (c, g)) in cpu.iter().zip(&sim).enumerate() {
        let ok = (c - g).abs() <= 1e-4 * (1.0 + c.abs());
        bad += usize::from(!ok);
        println!(
            "{:>4}  {c:.6}     {g:.6}{}",
            k + 1,
            if ok { "" } else { "   <- differs" }
        );
    }
    println!(
        "on the simulated GPU: {} kernels run ({} PTX launches, {} cuBLAS calls), {} on the CPU",
        after.gpu_kernels_run - before.gpu_kernels_run,
        after.ptx_launches - before.ptx_launches,
        after.cublas_calls - before.cublas_calls,
        after.cpu_kernels_run - before.cpu_kernels_run
    );
    if bad > 0 || after.gpu_kernels_run == before.gpu_kernels_run || sim.len() != steps {
        eprintln!("the simulated GPU's losses differ from the CPU's at {bad} steps");
        std::process::exit(1);
    }
    Ok(())
}
