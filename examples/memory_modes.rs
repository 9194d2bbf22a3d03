//! The allocator's two modes on one MLP training step (issue 5): peak
//! reserved memory and step time in runtime-efficient and memory-efficient
//! mode, with the static memory plan's prediction beside the measured peak.
//!
//! MLP 784-512-512-10, ReLU, softmax cross-entropy, plain SGD, f32.
//!
//! ```sh
//! cargo run --release --example memory_modes                 # both modes, batch 256, 20 steps each
//! cargo run --release --example memory_modes -- memory 50    # one mode only (for the process's peak RSS)
//! cargo run --release --example memory_modes -- both 40 plan # ... and print the plans (Fig. 4.8 tables)
//! ```
//!
//! Memory is measured per mode from the moment the model (parameters and
//! input) is built, on an empty cache with the peaks reset, so "peak
//! reserved" covers everything training needs (parameters, input,
//! activations, gradients, the optimizer, and in runtime-efficient mode
//! the pool's cache), and not the initialisation's temporaries. Time: then
//! the modes alternate in rounds of 4 timed steps, each after one untimed
//! step (after a switch, runtime-efficient mode refills its cache), so that
//! load from other processes hits both; medians of wall time and of the
//! process's CPU time per step.

use std::time::Instant;
use tenjin::alloc::{self, AllocMode, AllocStats};
use tenjin::nn::{Linear, Module};
use tenjin::optim::{Optimizer, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

const DIMS: [usize; 4] = [784, 512, 512, 10];

struct Mlp {
    layers: Vec<Linear>,
    x: Tensor,
    targets: Vec<usize>,
    opt: SGD,
}

impl Mlp {
    fn new(batch: usize) -> Result<Mlp, Error> {
        let layers = DIMS
            .windows(2)
            .enumerate()
            .map(|(l, w)| Linear::new(w[0], w[1], 1 + l as u64))
            .collect::<Result<Vec<_>, _>>()?;
        let x = Tensor::randn(&[batch, DIMS[0]], DType::F32, 100)?;
        let targets = (0..batch).map(|i| (i * 7 + 3) % DIMS[3]).collect();
        let params = layers.iter().flat_map(|l| l.parameters()).collect();
        let opt = SGD::new(
            params,
            SgdConfig {
                lr: 1e-3,
                ..Default::default()
            },
        )?;
        Ok(Mlp {
            layers,
            x,
            targets,
            opt,
        })
    }

    fn loss(&self) -> Result<Tensor, Error> {
        let mut h = self.x.clone();
        for (l, layer) in self.layers.iter().enumerate() {
            h = layer.forward(&h)?;
            if l + 1 < self.layers.len() {
                h = h.relu()?;
            }
        }
        h.cross_entropy(&self.targets)
    }

    /// One training step; with `plan`, the loss's memory plan too, and the
    /// bytes in use when the step started (after `zero_grad`).
    fn step(&mut self, plan: bool) -> Result<Option<(tenjin::trace::MemoryPlan, usize)>, Error> {
        self.opt.zero_grad();
        let in_use = alloc::stats().bytes_in_use;
        let loss = self.loss()?;
        let p = if plan {
            Some((loss.memory_plan()?, in_use))
        } else {
            None
        };
        loss.backward()?;
        self.opt.step()?;
        Ok(p)
    }
}

/// What one mode's memory phase measured.
struct Memory {
    stats: AllocStats,
    allocations_after_warmup: u64,
    /// The plan's peak plus the bytes outside the trace (the optimizer's
    /// scalars): the allocator's peak in use it predicts.
    plan_peak: usize,
    model_bytes: usize,
}

/// Builds the model in `mode` and trains it `steps` steps on an empty
/// cache, measuring memory; nothing else is allocated meanwhile.
fn memory_phase(
    mode: AllocMode,
    batch: usize,
    steps: usize,
    print_plan: bool,
) -> Result<Memory, Error> {
    alloc::set_mode(mode);
    let before = alloc::stats().bytes_in_use;
    let mut m = Mlp::new(batch)?;
    // Initialisation temporaries are not training memory: start from an
    // empty cache with the parameters and the input in place.
    alloc::empty_cache();
    alloc::reset_peak();
    let start = alloc::stats();
    let model_bytes = start.bytes_in_use - before;
    let mut plan_peak = 0;
    let mut after_warmup = 0;
    for s in 0..steps.max(3) {
        if let Some((p, in_use)) = m.step(s == 1)? {
            if print_plan {
                println!("{p}");
            }
            plan_peak = p.peak_bytes + (in_use - p.baseline_bytes);
        }
        if s == 1 {
            after_warmup = alloc::stats().allocations;
            // Linux: reset the process's peak RSS, to read the steady
            // state's peak at the end of the phase.
            let _ = std::fs::write("/proc/self/clear_refs", "5");
        }
    }
    println!(
        "{mode:?}: process peak RSS over steps 3..{steps}: VmHWM {}",
        proc_status("VmHWM:").unwrap_or_default()
    );
    let stats = alloc::stats();
    let memory = Memory {
        allocations_after_warmup: stats.allocations - after_warmup,
        stats: AllocStats {
            allocations: stats.allocations - start.allocations,
            ..stats
        },
        plan_peak,
        model_bytes,
    };
    Ok(memory)
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// CPU time of the whole process (all threads), in ms.
fn cpu_ms() -> f64 {
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.sec as f64 * 1e3 + ts.nsec as f64 / 1e6
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn proc_status(key: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with(key))
        .map(|l| l[key.len()..].trim().to_string())
}

fn mib(b: usize) -> String {
    format!("{:.2} MiB", b as f64 / (1 << 20) as f64)
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map(String::as_str).unwrap_or("both");
    let steps: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    let print_plan = args.iter().any(|a| a == "plan");
    let batch: usize = std::env::var("BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let modes: Vec<AllocMode> = match which {
        "runtime" => vec![AllocMode::RuntimeEfficient],
        "memory" => vec![AllocMode::MemoryEfficient],
        _ => vec![AllocMode::RuntimeEfficient, AllocMode::MemoryEfficient],
    };
    println!(
        "MLP {DIMS:?} batch {batch}, f32, SGD, {} threads, {steps} steps per mode",
        tenjin::jit::num_threads()
    );
    println!(
        "process before training: VmRSS {}",
        proc_status("VmRSS:").unwrap_or_default()
    );
    let mut memory: Vec<Memory> = Vec::new();
    for &mode in &modes {
        memory.push(memory_phase(mode, batch, steps, print_plan)?);
    }
    let mut models: Vec<Mlp> = Vec::new();
    for &mode in &modes {
        alloc::set_mode(mode);
        models.push(Mlp::new(batch)?);
    }
    // Time: the modes alternate in rounds of ROUND timed steps, each round
    // after one untimed step (after a switch, runtime-efficient mode
    // refills its cache), so that load from other processes hits both.
    const ROUND: usize = 4;
    let rounds = steps.div_ceil(ROUND).max(1);
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for _ in 0..rounds {
        for (k, m) in models.iter_mut().enumerate() {
            alloc::set_mode(modes[k]);
            m.step(false)?;
            for _ in 0..ROUND {
                let (t, c) = (Instant::now(), cpu_ms());
                m.step(false)?;
                wall[k].push(t.elapsed().as_secs_f64() * 1e3);
                cpu[k].push(cpu_ms() - c);
            }
        }
    }
    println!(
        "{:<18} {:>10} {:>10} {:>14} {:>14} {:>14} {:>14} {:>10} {:>10}",
        "mode",
        "wall med",
        "cpu med",
        "peak reserved",
        "peak in use",
        "plan peak",
        "model+input",
        "sys allocs",
        "after st.2"
    );
    let mut summary: Vec<(f64, f64, usize)> = Vec::new();
    for (k, (mode, mem)) in modes.iter().zip(&memory).enumerate() {
        let (w, c) = (median(&mut wall[k]), median(&mut cpu[k]));
        println!(
            "{:<18} {:>7.3} ms {:>7.3} ms {:>14} {:>14} {:>14} {:>14} {:>10} {:>10}",
            format!("{mode:?}"),
            w,
            c,
            mib(mem.stats.peak_reserved),
            mib(mem.stats.peak_in_use),
            mib(mem.plan_peak),
            mib(mem.model_bytes),
            mem.stats.allocations,
            mem.allocations_after_warmup
        );
        summary.push((w, c, mem.stats.peak_reserved));
    }
    if let [(w_rt, c_rt, r_rt), (w_me, c_me, r_me)] = summary[..] {
        println!(
            "memory-efficient / runtime-efficient: peak reserved {:.1}% (target <= 85%), step time {:+.1}% wall, {:+.1}% cpu (target <= +15%)",
            100.0 * r_me as f64 / r_rt as f64,
            100.0 * (w_me / w_rt - 1.0),
            100.0 * (c_me / c_rt - 1.0)
        );
    }
    println!(
        "process: VmRSS {} at the end",
        proc_status("VmRSS:").unwrap_or_default()
    );
    Ok(())
}
