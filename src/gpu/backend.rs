//! The GPU backend behind the runtime's `Backend` interface, over any
//! [`Driver`]: a real GPU through cudarc or the simulated device.
//!
//! Owns [`GpuBackend`]: compiling a planned route — a loop nest emitted as
//! PTX and loaded (or, for a new size of an op met before, the module its
//! nest loaded already, which reads the sizes at launch:
//! `crate::kernel::sharing`), launched one thread per output element in a
//! grid-stride loop; a contraction as cuBLAS calls
//! (`Contraction::blas`), followed by its epilogue's loop kernel in place
//! over the output; a host stage with a device form (conversions, the
//! indexing ops' gather and scatter-add) as a `ptx::builtin` kernel, a
//! recomputed block by its own code over device tensors, any other
//! refused with an error — and the buffer operations (fill, add: `ptx::builtin`
//! kernels; copies between the host and the device). Must not plan: it
//! compiles exactly the route it is given.

mod gemm;

use super::counters::{count, COUNTERS};
use super::driver::{Arg, Driver};
use super::profile;
use super::ptx::{self, builtin::Builtin, builtin::MAX_STRIDED_RANK};
use crate::alloc::Device;
use crate::dtype::Element;
use crate::kernel::backend::{
    check_len, check_same, Backend, Executable, Operand, OperandMut, Target,
};
use crate::kernel::contraction::Contraction;
use crate::kernel::host::{DeviceForm, HostKernel, Lines};
use crate::kernel::sharing::{Ops, OwnLater, Tier};
use crate::kernel::strided::{self, Strided};
use crate::kernel::{Kernel, Route, Stmt};
use crate::{DType, Error};
use gemm::GemmKernel;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

/// Threads per block of every launch.
const BLOCK: u32 = 256;
/// Blocks per multiprocessor at most (the grid-stride loop does the rest).
const BLOCKS_PER_SM: u32 = 32;

/// The loaded buffer-operation kernels by operation and dtype.
pub(super) type Builtins<F> = Mutex<HashMap<(Builtin, DType), Arc<F>>>;

/// The module of `b` writing `dtype`, loaded once into `cache`.
pub(super) fn load_builtin<D: Driver>(
    driver: &D,
    cache: &Builtins<D::Function>,
    b: Builtin,
    dtype: DType,
) -> Result<Arc<D::Function>, Error> {
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = cache.get(&(b, dtype)) {
        return Ok(f.clone());
    }
    let f = Arc::new(driver.load(&ptx::builtin::module(b, dtype, driver.arch()))?);
    cache.insert((b, dtype), f.clone());
    Ok(f)
}

/// A device's backend.
pub(crate) struct GpuBackend<D: Driver> {
    device: Device,
    driver: Arc<D>,
    builtins: Arc<Builtins<D::Function>>,
    modules: Modules<D::Function>,
}

/// The loop kernels' modules that kernels differing only in sizes share
/// (`crate::kernel::sharing`'s policy): each module by its PTX text, held
/// weakly here and strongly by the kernels running it, and the ops met.
struct Modules<F> {
    /// The modules, and the map's size after its last sweep of dead ones.
    by_text: Mutex<(HashMap<String, Weak<F>>, usize)>,
    ops: Ops,
}

/// The grid of a launch over `total` elements.
fn grid(driver: &impl Driver, total: usize) -> u32 {
    let cap = driver.multiprocessors().max(1) as usize * BLOCKS_PER_SM as usize;
    total.div_ceil(BLOCK as usize).clamp(1, cap) as u32
}

/// `len` elements of `dtype` at `addr` as a launch argument, written when
/// `writable`.
fn buffer(addr: u64, len: usize, dtype: DType, writable: bool) -> Arg {
    Arg::Buffer {
        addr,
        bytes: len * dtype.size(),
        writable,
    }
}

/// `op` as a read-only launch argument.
fn input(op: &Operand<'_>) -> Arg {
    buffer(op.address(), op.len(), op.dtype(), false)
}

/// `op` as the written launch argument.
fn output(op: &OperandMut<'_>) -> Arg {
    buffer(op.address(), op.len(), op.dtype(), true)
}

/// Launches the built-in kernel `function` (`name` in the profile) over
/// `n` elements with `args` (counted, timed when profiling).
fn launch_over<D: Driver>(
    driver: &D,
    name: &str,
    function: &D::Function,
    n: usize,
    args: &[Arg],
) -> Result<(), Error> {
    count(&COUNTERS.launches, 1);
    profile::timed(
        driver,
        || format!("builtin {name} n={n}"),
        || driver.launch(function, grid(driver, n), BLOCK, args),
    )
}

/// How a loop kernel is launched, fixed when it is compiled: its grid
/// and block for the output count it was planned for (one thread per
/// element or per group of elements of a vectorised kernel, in a
/// grid-stride loop; or a block per element for a team), from the
/// device's multiprocessor count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LaunchShape {
    grid: u32,
    block: u32,
}

impl LaunchShape {
    fn new(driver: &impl Driver, total: usize, team: u32, per_thread: usize) -> LaunchShape {
        if team <= 1 {
            return LaunchShape {
                grid: grid(driver, total.div_ceil(per_thread.max(1))),
                block: BLOCK,
            };
        }
        // A block per output element (the blocks stride over them).
        let cap = driver.multiprocessors().max(1) as usize * BLOCKS_PER_SM as usize;
        LaunchShape {
            grid: total.clamp(1, cap) as u32,
            block: team,
        }
    }
}

/// A loop kernel loaded on the device, with its launch prepared: the
/// shape computed once, and the argument list's storage reused by every
/// run (a run writes the operands' addresses into it; nothing is
/// allocated per launch).
struct LoopKernel<D: Driver> {
    driver: Arc<D>,
    function: Arc<D::Function>,
    /// The sizes a shared module reads at launch (`ptx::launch_sizes`),
    /// passed after the buffers; none for a module of its own.
    sizes: Vec<u64>,
    /// A kernel running a shared module: its own module, made after
    /// `SPECIALISE_AFTER` launches.
    own: Option<Box<OwnLater<D::Function>>>,
    /// `Kernel::threads_per_output`: above 1, a block of that many threads
    /// per output element.
    threads_per_output: u32,
    /// For the output count it was emitted for (the runtime checks every
    /// run's lengths against it; the grid-stride loop covers any grid).
    shape: LaunchShape,
    /// The launch arguments (output first, then the inputs), refilled per run.
    args: Mutex<Vec<Arg>>,
    /// What the profile calls it (`super::profile`).
    label: String,
}

impl<D: Driver> LoopKernel<D> {
    /// The module to launch now, with the sizes it reads (counts a
    /// launch of a shared module).
    fn current(&self) -> (&D::Function, &[u64]) {
        let own = self.own.as_ref().and_then(|own| {
            own.run(|kernel, dtype| {
                // Emitted before with parameters: a failure here keeps
                // the shared module.
                let text =
                    ptx::module(kernel_hash(kernel), kernel, dtype, self.driver.arch()).ok()?;
                let f = self.driver.load(&text).ok()?;
                count(&COUNTERS.modules_specialised, 1);
                Some(f)
            })
        });
        match own {
            Some(f) => (f, &[]),
            None => (&self.function, &self.sizes),
        }
    }

    /// Launches over `total` outputs written to `out`, reading `inputs`
    /// and then `last` (an epilogue's product).
    fn launch(
        &self,
        out: Arg,
        total: usize,
        inputs: &[Operand<'_>],
        last: Option<&Operand<'_>>,
    ) -> Result<(), Error> {
        if total == 0 {
            return Ok(());
        }
        let (function, sizes) = self.current();
        let mut args = self.args.lock().unwrap_or_else(|e| e.into_inner());
        args.clear();
        args.push(out);
        args.extend(inputs.iter().chain(last).map(input));
        args.extend(sizes.iter().map(|&v| Arg::Scalar(v)));
        count(&COUNTERS.launches, 1);
        profile::timed(
            &*self.driver,
            || self.label.clone(),
            || {
                self.driver
                    .launch(function, self.shape.grid, self.shape.block, &args)
            },
        )
    }
}

impl<D: Driver> Executable for LoopKernel<D> {
    fn run(&self, inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error> {
        count(&COUNTERS.kernels_run, 1);
        self.launch(output(&out), out.len(), inputs, None)
    }

    unsafe fn run_in_place(&self, inputs: &[Operand<'_>], aliased: usize) -> Result<bool, Error> {
        // A team's other threads may still read the element its first
        // thread stores: never in place.
        let Some(over) = inputs.get(aliased).filter(|_| self.threads_per_output == 1) else {
            return Ok(false);
        };
        count(&COUNTERS.kernels_run, 1);
        let target = buffer(over.address(), over.len(), over.dtype(), true);
        self.launch(target, over.len(), inputs, None)?;
        Ok(true)
    }
}

/// Launches the loaded element-wise conversion `function` (`name` in the
/// profile: a cast, or a rounding to a half's values) from `src` into
/// `dst`.
fn cast_on<D: Driver>(
    driver: &D,
    name: &str,
    function: &D::Function,
    src: Operand<'_>,
    dst: OperandMut<'_>,
) -> Result<(), Error> {
    cast_buffers(driver, name, function, input(&src), output(&dst), src.len())
}

/// [`cast_on`] over `n` elements of the buffers `src` and `dst`.
pub(super) fn cast_buffers<D: Driver>(
    driver: &D,
    name: &str,
    function: &D::Function,
    src: Arg,
    dst: Arg,
    n: usize,
) -> Result<(), Error> {
    if n == 0 {
        return Ok(());
    }
    launch_over(
        driver,
        name,
        function,
        n,
        &[dst, src, Arg::Scalar(n as u64)],
    )
}

/// A host stage the device runs with a kernel of its own
/// (`HostKernel::device_form`): a conversion between element types, or the
/// gather and scatter-add of the indexing ops. Its module is loaded per
/// input types on first use, into the backend's cache of builtins.
struct FormKernel<D: Driver> {
    driver: Arc<D>,
    /// The host stage's name (`to_dtype`, `embedding`, ...), for errors.
    name: String,
    form: DeviceForm,
    out: DType,
    /// The backend's loaded builtins.
    builtins: Arc<Builtins<D::Function>>,
}

impl<D: Driver> FormKernel<D> {
    fn err(&self, message: String) -> Error {
        Error::Invalid {
            function: self.name.clone(),
            message,
        }
    }

    fn function(&self, b: Builtin) -> Result<Arc<D::Function>, Error> {
        load_builtin(&*self.driver, &self.builtins, b, self.out)
    }

    /// Launches the indexing `builtin` over `threads` with data `src`,
    /// integer `ids`, the layout `lines` and `ranges` (`Builtin`'s
    /// parameters); `(out, src, ids)` must have `lens` elements.
    #[allow(clippy::too_many_arguments)]
    fn launch_indexing(
        &self,
        builtin: Builtin,
        out: OperandMut<'_>,
        src: &Operand<'_>,
        ids: &Operand<'_>,
        (threads, ranges): (usize, usize),
        lines: Lines,
        (out_len, src_len, ids_len): (usize, usize, usize),
    ) -> Result<(), Error> {
        if ids.dtype().is_float() {
            return Err(self.err(format!("ids of type {:?}", ids.dtype())));
        }
        let lens = (out.len(), src.len(), ids.len());
        if lens != (out_len, src_len, ids_len) {
            return Err(self.err(format!(
                "internal: (out, data, ids) of {lens:?} elements where the layout needs {:?}",
                (out_len, src_len, ids_len)
            )));
        }
        if threads == 0 || out.is_empty() {
            return Ok(());
        }
        let scalar = |v: usize| Arg::Scalar(v as u64);
        let args = [
            output(&out),
            input(src),
            input(ids),
            scalar(threads),
            scalar(lines.size),
            scalar(lines.inner),
            scalar(lines.count),
            scalar(ranges),
        ];
        let name = format!("{builtin:?}");
        launch_over(
            &*self.driver,
            &name,
            &*self.function(builtin)?,
            threads,
            &args,
        )
    }
}

/// Threads that fill a large GPU (132 SMs of 1024).
const FILL_THREADS: usize = 1 << 17;
/// Ids the row ranges of one line of a scatter-add read in all.
const SCATTER_SCAN: usize = 1 << 20;

/// The row ranges a scatter-add splits each of `lines` lines of `size`
/// rows into (`Builtin::ScatterAdd`): enough threads to fill the GPU (an
/// embedding's 768 columns alone leave it nearly idle, each thread adding
/// 8192 rows in series), while every range reads all `count` ids, so the
/// ranges of a line read at most [`SCATTER_SCAN`] ids together.
fn scatter_ranges(lines: usize, size: usize, count: usize) -> usize {
    (FILL_THREADS / lines.max(1))
        .min(SCATTER_SCAN / count.max(1))
        .min(size)
        .max(1)
}

impl<D: Driver> Executable for FormKernel<D> {
    fn run(&self, inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error> {
        count(&COUNTERS.kernels_run, 1);
        let arity = |n: usize| self.err(format!("internal: {} inputs, not {n}", inputs.len()));
        match self.form {
            DeviceForm::Cast => {
                let [src] = inputs else {
                    return Err(arity(1));
                };
                let f = self.function(Builtin::Cast { from: src.dtype() })?;
                cast_on(&*self.driver, "cast", &f, *src, out)
            }
            DeviceForm::RoundToHalf(half) => {
                let [src] = inputs else {
                    return Err(arity(1));
                };
                let f = self.function(Builtin::RoundToHalf { half })?;
                cast_on(&*self.driver, "round_to_half", &f, *src, out)
            }
            DeviceForm::Gather { lines, along } => {
                let [x, ids] = inputs else {
                    return Err(arity(2));
                };
                let b = Builtin::Gather {
                    ids: ids.dtype(),
                    along,
                };
                let lens = (lines.picked_len(), lines.data_len(), lines.ids_len(along));
                self.launch_indexing(b, out, x, ids, (lines.picked_len(), 1), lines, lens)
            }
            DeviceForm::ScatterAdd { lines, along } => {
                let [ids, dy] = inputs else {
                    return Err(arity(2));
                };
                // (Half gradients are summed in f32 by the ops layer.)
                if !self.out.kernels_compute_in() {
                    return Err(self.err(format!("a gradient of type {:?}", self.out)));
                }
                let b = Builtin::ScatterAdd {
                    ids: ids.dtype(),
                    along,
                };
                let lens = (lines.data_len(), lines.picked_len(), lines.ids_len(along));
                let line_count = lines.outer * lines.inner;
                let ranges = scatter_ranges(line_count, lines.size, lines.count);
                let threads = (line_count * ranges, ranges);
                self.launch_indexing(b, out, dy, ids, threads, lines, lens)
            }
            DeviceForm::Block => Err(self.err("internal: a block reached a builtin kernel".into())),
        }
    }

    unsafe fn run_in_place(&self, _: &[Operand<'_>], _: usize) -> Result<bool, Error> {
        Ok(false)
    }
}

/// A host stage that computes with device tensors itself (a recomputed
/// block, `DeviceForm::Block`): its own launches are counted where they
/// happen.
struct BlockKernel(Arc<dyn HostKernel>);

impl Executable for BlockKernel {
    fn run(&self, inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error> {
        self.0.run_on(inputs, out)
    }

    unsafe fn run_in_place(&self, _: &[Operand<'_>], _: usize) -> Result<bool, Error> {
        Ok(false)
    }
}

/// A stable name for a kernel's module (the dump file).
fn kernel_hash(k: &Kernel) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{k:?}").hash(&mut h);
    h.finish()
}

/// What the profile calls a loop kernel (`super::profile`): its output
/// and argument shapes, its team and its reductions' lengths.
fn loop_label(k: &Kernel) -> String {
    fn trips(stmts: &[Stmt], out: &mut Vec<u64>) {
        for s in stmts {
            match s {
                Stmt::Reduce { body, .. } => {
                    out.push(body.max_trips);
                    trips(&body.body, out);
                }
                Stmt::For(l) => trips(&l.body, out),
                Stmt::If {
                    then, otherwise, ..
                } => {
                    trips(then, out);
                    trips(otherwise, out);
                }
                _ => {}
            }
        }
    }
    let mut sums = Vec::new();
    trips(&k.body, &mut sums);
    let args: Vec<String> = k.args.iter().map(|a| format!("{:?}", a.shape)).collect();
    format!(
        "loop {:?} <- {}{}{} #{:08x}",
        k.out_shape,
        args.join(" "),
        if sums.is_empty() {
            String::new()
        } else {
            format!(", reductions {sums:?}")
        },
        if k.threads_per_output > 1 {
            format!(", team {}", k.threads_per_output)
        } else {
            String::new()
        },
        kernel_hash(k) as u32
    )
}

/// `value` as the bits of one `dtype` element.
fn element_bits(value: f64, dtype: DType) -> u64 {
    match dtype {
        DType::F32 => (value as f32).to_bits() as u64,
        DType::F64 => value.to_bits(),
        DType::I32 => value as i32 as u32 as u64,
        DType::I64 => value as i64 as u64,
        // The CPU's conversion (through f32, as PyTorch's).
        DType::BF16 => u64::from(<crate::bf16 as Element>::from_f64(value).to_bits()),
        DType::F16 => u64::from(<crate::f16 as Element>::from_f64(value).to_bits()),
    }
}

impl<D: Driver> GpuBackend<D> {
    pub(crate) fn new(device: Device, driver: D) -> GpuBackend<D> {
        GpuBackend {
            device,
            driver: Arc::new(driver),
            builtins: Arc::new(Mutex::new(HashMap::new())),
            modules: Modules {
                by_text: Mutex::new((HashMap::new(), 0)),
                ops: Ops::default(),
            },
        }
    }

    fn err(&self, message: impl std::fmt::Display) -> Error {
        Error::Device {
            device: self.device.to_string(),
            message: message.to_string(),
        }
    }

    /// `kernel` emitted as PTX and loaded, or a module loaded before
    /// whose text is the same: an op's first kernel gets a module of its
    /// own, a new size of it the module of its nest, which reads the sizes
    /// at launch (`crate::kernel::sharing`).
    fn loop_kernel(&self, kernel: &Kernel, dtype: DType) -> Result<LoopKernel<D>, Error> {
        let arch = self.driver.arch();
        let (emitted, own) = match self.modules.ops.tier(kernel, dtype) {
            Tier::Own => (kernel.clone(), None),
            Tier::Nest { nest, then_own } => (
                *nest,
                then_own.then(|| Box::new(OwnLater::new(kernel.clone(), dtype))),
            ),
        };
        let text = ptx::module(kernel_hash(&emitted), &emitted, dtype, arch)?;
        let by_text = || {
            self.modules
                .by_text
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        let found = by_text().0.get(&text).and_then(Weak::upgrade);
        let function = match found {
            Some(f) => {
                count(&COUNTERS.modules_shared, 1);
                f
            }
            None => {
                // Loaded outside the lock: another thread may load the
                // same text meanwhile, and the last one in is kept.
                let f = Arc::new(self.driver.load(&text)?);
                count(&COUNTERS.modules_loaded, 1);
                let mut guard = by_text();
                let (modules, swept_at) = &mut *guard;
                modules.insert(text, Arc::downgrade(&f));
                if modules.len() > 2 * (*swept_at).max(64) {
                    modules.retain(|_, w| w.strong_count() > 0);
                    *swept_at = modules.len();
                }
                f
            }
        };
        let total = kernel.teams();
        let team = kernel.threads_per_output;
        let per_thread = ptx::elements_per_thread(kernel, dtype);
        let sizes: Vec<u64> = ptx::launch_sizes(&emitted)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        Ok(LoopKernel {
            driver: self.driver.clone(),
            args: Mutex::new(Vec::with_capacity(kernel.args.len() + 2 + sizes.len())),
            sizes,
            own,
            function,
            threads_per_output: team,
            shape: LaunchShape::new(&*self.driver, total, team, per_thread),
            label: loop_label(kernel),
        })
    }

    /// The loaded module of a buffer operation.
    fn builtin(&self, b: Builtin, dtype: DType) -> Result<Arc<D::Function>, Error> {
        load_builtin(&*self.driver, &self.builtins, b, dtype)
    }

    /// The device this operand must live on, checked.
    fn on_device(&self, op: &str, device: Device) -> Result<(), Error> {
        if device == self.device {
            Ok(())
        } else {
            Err(self.err(format!("{op}: an operand is on {device}")))
        }
    }
}

impl<D: Driver> Backend for GpuBackend<D> {
    fn device(&self) -> Device {
        self.device
    }

    fn target(&self) -> Target {
        Target::Gpu
    }

    fn compile(&self, route: &Route, dtype: DType) -> Result<Box<dyn Executable>, Error> {
        let gemm = |c: &Contraction, epilogue: Option<LoopKernel<D>>| {
            let plan = c.blas().ok_or_else(|| {
                self.err("a contraction cuBLAS cannot express reached the GPU backend (the planner routes those to loop kernels)")
            })?;
            Ok(Box::new(GemmKernel {
                driver: self.driver.clone(),
                device: self.device,
                builtins: self.builtins.clone(),
                contraction: c.clone(),
                plan,
                epilogue,
            }) as Box<dyn Executable>)
        };
        match route {
            Route::Loop(kernel) => Ok(Box::new(self.loop_kernel(kernel, dtype)?)),
            Route::Gemm(c) => gemm(c, None),
            Route::GemmThenLoop {
                contraction,
                kernel,
                ..
            } => gemm(contraction, Some(self.loop_kernel(kernel, dtype)?)),
            Route::Winograd(_) | Route::WinogradThenLoop { .. } => Err(self.err(
                "Winograd's convolution runs on the CPU only (the planner gives a GPU its GEMM routes)",
            )),
            Route::Host(h) => match h.device_form() {
                Some(DeviceForm::Block) => Ok(Box::new(BlockKernel(h.clone()))),
                Some(form) => Ok(Box::new(FormKernel {
                    driver: self.driver.clone(),
                    name: h.name().to_string(),
                    form,
                    out: route.out_dtype(dtype),
                    builtins: self.builtins.clone(),
                })),
                None => Err(self.err(format!("`{}` is a host stage with no GPU kernel", h.name()))),
            },
        }
    }

    fn fill(&self, out: OperandMut<'_>, value: f64) -> Result<(), Error> {
        self.on_device("fill", out.device())?;
        if out.is_empty() {
            return Ok(());
        }
        let f = self.builtin(Builtin::Fill, out.dtype())?;
        let n = out.len();
        let value = element_bits(value, out.dtype());
        let args = [output(&out), Arg::Scalar(n as u64), Arg::Scalar(value)];
        launch_over(&*self.driver, "fill", &f, n, &args)
    }

    fn copy(&self, src: Operand<'_>, dst: OperandMut<'_>) -> Result<(), Error> {
        check_same("copy", &src, &dst)?;
        if src.is_empty() {
            return Ok(());
        }
        let bytes = (src.len() * src.dtype().size()) as u64;
        match (src.device(), dst.device()) {
            (Device::Cpu, d) if d == self.device => {
                count(&COUNTERS.bytes_to_device, bytes);
                count(&COUNTERS.synchronizations, 1);
                self.driver.copy_to_device(dst.address(), src.host_bytes()?)
            }
            (s, Device::Cpu) if s == self.device => {
                count(&COUNTERS.bytes_to_host, bytes);
                count(&COUNTERS.synchronizations, 1);
                let src_addr = src.address();
                self.driver.copy_to_host(dst.host_bytes_mut()?, src_addr)
            }
            (s, d) if s == self.device && d == self.device => {
                let bytes = src.len() * src.dtype().size();
                profile::timed(
                    &*self.driver,
                    || format!("builtin copy bytes={bytes}"),
                    || {
                        self.driver
                            .copy_on_device(dst.address(), src.address(), bytes)
                    },
                )
            }
            (s, d) => Err(self.err(format!("copy from {s} to {d}"))),
        }
    }

    fn add_assign(&self, dst: OperandMut<'_>, src: Operand<'_>) -> Result<(), Error> {
        check_same("add_assign", &src, &dst)?;
        self.on_device("add_assign", dst.device())?;
        self.on_device("add_assign", src.device())?;
        if src.is_empty() {
            return Ok(());
        }
        let f = self.builtin(Builtin::AddAssign, src.dtype())?;
        let n = src.len();
        let args = [output(&dst), input(&src), Arg::Scalar(n as u64)];
        launch_over(&*self.driver, "add_assign", &f, n, &args)
    }

    /// One launch: each thread finds its element's position from the
    /// placement's sizes and coefficients (merged first; a placement of
    /// more dimensions than the kernel takes goes run by run).
    fn add_strided(
        &self,
        dst: OperandMut<'_>,
        src: Operand<'_>,
        start: usize,
        place: &Strided,
    ) -> Result<(), Error> {
        let op = "add_strided";
        self.on_device(op, dst.device())?;
        self.on_device(op, src.device())?;
        let merged = place.merged();
        if src.dtype() != dst.dtype() || src.len() != merged.len() {
            return Err(self.err(format!(
                "{op}: {} {:?} elements placed as {:?} into {:?}",
                src.len(),
                src.dtype(),
                place.shape,
                dst.dtype()
            )));
        }
        if src.is_empty() {
            return Ok(());
        }
        if merged.shape.len() > MAX_STRIDED_RANK {
            let (at, run) = place.runs(start, dst.len())?;
            return self.add_runs(dst, src, &at, run);
        }
        match merged.reach(start) {
            Some((lo, hi)) if lo >= 0 && (hi as u64) < dst.len() as u64 => {}
            _ => return Err(strided::outside(&format!("{:?}", place.shape), dst.len())),
        }
        let rank = merged.shape.len() as u8;
        let f = self.builtin(Builtin::AddStrided { rank }, src.dtype())?;
        let n = src.len();
        let mut args = vec![
            output(&dst),
            input(&src),
            Arg::Scalar(n as u64),
            Arg::Scalar(start as u64),
        ];
        for (&size, &coeff) in merged.shape.iter().zip(&merged.coeffs) {
            args.extend([Arg::Scalar(size as u64), Arg::Scalar(coeff as u64)]);
        }
        launch_over(&*self.driver, op, &f, n, &args)
    }

    fn cast(&self, src: Operand<'_>, dst: OperandMut<'_>) -> Result<(), Error> {
        check_len("cast", &src, &dst)?;
        self.on_device("cast", src.device())?;
        self.on_device("cast", dst.device())?;
        cast_on(
            &*self.driver,
            "cast",
            &*self.builtin(Builtin::Cast { from: src.dtype() }, dst.dtype())?,
            src,
            dst,
        )
    }

    fn synchronize(&self) -> Result<(), Error> {
        count(&COUNTERS.synchronizations, 1);
        self.driver.synchronize()
    }
}
