//! [`Nccl`]: ranks that each drive one NVIDIA GPU, over NVIDIA's NCCL
//! (feature `nccl`, through cudarc's bindings).
//!
//! NCCL is opened with `dlopen` on first use, so the crate builds and runs
//! with no NCCL installed: [`Nccl::new`] then returns an error naming the
//! missing library (or the too old one, or the missing driver or device);
//! nothing panics. The ranks meet through an [`NcclId`] that rank 0 makes
//! and every other rank receives: as bytes the launcher passes around, or
//! with [`NcclId::share`] over another [`Collective`] (MPI, say).
//!
//! [`Collective`] works on host `f64` buffers, so a reduction copies its
//! buffer to the device, all-reduces it there (`ncclFloat64`, sum) on this
//! backend's own stream, and copies the sum back when it is waited for.
//! NCCL's ring gives every rank the same bits, but not the rank-order sum
//! of [`super::InProcess`] and [`super::Mpi`]. A wait polls the work's
//! event and NCCL's asynchronous error until its timeout; then it aborts
//! the communicator (`ncclCommAbort`), and every later call is an error.
//! Owns nothing of the GPU backend: the tensors' device, memory and
//! kernels are `gpu`'s; this module opens its own stream on the device.

use super::{check_root, error, Collective, PendingReduce, Values};
use crate::Error;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DeviceRepr};
use cudarc::nccl::{result, sys};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The oldest NCCL accepted: 2.18 (`ncclGetVersion`'s 21800).
const MIN_VERSION: i32 = 21800;

/// What identifies one group of NCCL ranks: made by rank 0
/// ([`NcclId::new`]) and given to every rank before [`Nccl::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcclId([u8; 128]);

impl NcclId {
    /// A fresh id (`ncclGetUniqueId`); an error without NCCL.
    pub fn new() -> Result<NcclId, Error> {
        library("NcclId::new")?;
        let id = result::get_uniqueid()
            .map_err(|e| error("NcclId::new", format!("ncclGetUniqueId: {e:?}")))?;
        Ok(NcclId(id.internal.map(|c| c as u8)))
    }

    /// The id as 128 bytes, to pass to the other ranks.
    pub fn to_bytes(&self) -> [u8; 128] {
        self.0
    }

    /// The id another rank made, from its bytes.
    pub fn from_bytes(bytes: [u8; 128]) -> NcclId {
        NcclId(bytes)
    }

    /// Rank 0 of `comm` makes an id and every rank of `comm` returns it
    /// (a broadcast of its bytes, one `f64` each: exact). Where rank 0
    /// cannot make one (no NCCL), it broadcasts that instead, and every
    /// rank returns an error.
    pub fn share(comm: &dyn Collective) -> Result<NcclId, Error> {
        // 256 in the first place: no id (a byte is at most 255).
        const NONE: f64 = 256.0;
        let mut bytes = vec![0.0f64; 128];
        let made = if comm.rank() == 0 {
            let made = NcclId::new();
            match &made {
                Ok(id) => bytes
                    .iter_mut()
                    .zip(id.0)
                    .for_each(|(v, b)| *v = f64::from(b)),
                Err(_) => bytes[0] = NONE,
            }
            Some(made)
        } else {
            None
        };
        comm.broadcast(&mut bytes, 0)?;
        if let Some(Err(e)) = made {
            return Err(e);
        }
        if bytes[0] == NONE {
            return Err(error(
                "NcclId::share",
                format!(
                    "rank 0 could not make an NCCL id (rank {} asked)",
                    comm.rank()
                ),
            ));
        }
        Ok(NcclId(std::array::from_fn(|k| bytes[k] as u8)))
    }
}

/// Whether NCCL can be opened and is recent enough; the error names what
/// is missing.
fn library(op: &str) -> Result<(), Error> {
    // SAFETY: only probes whether the library can be opened.
    if !unsafe { sys::is_culib_present() } {
        return Err(error(
            op,
            "the NCCL library (libnccl) is not installed".into(),
        ));
    }
    let version =
        result::get_nccl_version().map_err(|e| error(op, format!("ncclGetVersion: {e:?}")))?;
    if version < MIN_VERSION {
        return Err(error(
            op,
            format!("NCCL {version} is too old: tenjin needs {MIN_VERSION} (2.18) or newer"),
        ));
    }
    Ok(())
}

/// Whether CUDA device `device` exists (with its driver).
fn present(op: &str, device: usize) -> Result<(), Error> {
    let count = crate::runtime::cuda_device_count();
    if device >= count {
        return Err(error(
            op,
            format!("no CUDA device {device} ({count} present, or no driver)"),
        ));
    }
    Ok(())
}

/// The communicator, aborted once: by a timed-out wait or by the drop.
struct Handle(Mutex<Option<sys::ncclComm_t>>);

// SAFETY: NCCL communicators may be used from any thread; every use of
// this one holds the mutex.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

impl Handle {
    fn abort(&self) {
        if let Some(comm) = self.0.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // SAFETY: a live communicator, taken so no one uses it again.
            let _ = unsafe { result::comm_abort(comm) };
        }
    }

    /// NCCL's asynchronous error on this communicator, if any.
    fn async_error(&self) -> Option<String> {
        let guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let comm = (*guard)?;
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: a live communicator and a place for the result.
        let r = unsafe { sys::ncclCommGetAsyncError(comm, &mut state) };
        match (r, state) {
            (sys::ncclResult_t::ncclSuccess, sys::ncclResult_t::ncclSuccess) => None,
            (sys::ncclResult_t::ncclSuccess, s) => Some(format!("{s:?}")),
            (r, _) => Some(format!("ncclCommGetAsyncError: {r:?}")),
        }
    }
}

/// This process's rank of an NCCL group on one GPU (see the module
/// documentation).
///
/// ```no_run
/// use tenjin::distributed::{Collective, Nccl};
/// let comm = Nccl::single(0)?; // a world of one rank on GPU 0
/// let mut v = vec![1.0, 2.0];
/// comm.all_reduce_sum(&mut v)?;
/// assert_eq!(v, vec![1.0, 2.0]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct Nccl {
    rank: usize,
    world: usize,
    stream: Arc<CudaStream>,
    comm: Arc<Handle>,
    timeout: Duration,
    calls: AtomicU64,
    broken: Arc<AtomicBool>,
}

impl Nccl {
    /// Joins group `id` as `rank` of `world` on CUDA device `device`, with
    /// a 60 s timeout for joining and for each collective. An error
    /// without NCCL, a driver or the device, or when the others do not
    /// join in time.
    pub fn new(device: usize, rank: usize, world: usize, id: &NcclId) -> Result<Nccl, Error> {
        Nccl::join(device, rank, world, id, Duration::from_secs(60))
    }

    /// A world of one rank on device `device` (NCCL's reductions then
    /// return their input).
    pub fn single(device: usize) -> Result<Nccl, Error> {
        present("Nccl::single", device)?;
        let id = NcclId::new()?;
        Nccl::new(device, 0, 1, &id)
    }

    /// This handle with another timeout for each collective.
    pub fn with_timeout(mut self, timeout: Duration) -> Nccl {
        self.timeout = timeout;
        self
    }

    fn join(
        device: usize,
        rank: usize,
        world: usize,
        id: &NcclId,
        timeout: Duration,
    ) -> Result<Nccl, Error> {
        const OP: &str = "Nccl::new";
        if rank >= world {
            return Err(error(
                OP,
                format!("rank {rank} in a world of {world} ranks"),
            ));
        }
        present(OP, device)?;
        library(OP)?;
        let ctx =
            CudaContext::new(device).map_err(|e| error(OP, format!("device {device}: {e}")))?;
        let stream = ctx
            .new_stream()
            .map_err(|e| error(OP, format!("device {device}: a stream: {e}")))?;
        let unique = sys::ncclUniqueId {
            internal: id.0.map(|b| b as core::ffi::c_char),
        };
        // ncclCommInitRank waits for every rank: on a thread of its own, so
        // that a rank that never joins is a timeout here.
        let (send, got) = std::sync::mpsc::channel();
        let bind = ctx.clone();
        std::thread::Builder::new()
            .name("tenjin-nccl-init".into())
            .spawn(move || {
                let made = bind
                    .bind_to_thread()
                    .map_err(|e| e.to_string())
                    .and_then(|_| {
                        let mut comm = std::mem::MaybeUninit::uninit();
                        // SAFETY: a place for the communicator; the id's bytes.
                        unsafe {
                            result::comm_init_rank(
                                comm.as_mut_ptr(),
                                world as i32,
                                unique,
                                rank as i32,
                            )
                            .map_err(|e| format!("ncclCommInitRank: {e:?}"))?;
                            Ok(Handle(Mutex::new(Some(comm.assume_init()))))
                        }
                    });
                let _ = send.send(made);
            })
            .map_err(|e| error(OP, format!("cannot start a thread: {e}")))?;
        let comm = match got.recv_timeout(timeout) {
            Ok(made) => made.map_err(|m| error(OP, m))?,
            Err(_) => {
                return Err(error(
                    OP,
                    format!(
                        "rank {rank} waited {timeout:?} for the other ranks of {world} to join"
                    ),
                ))
            }
        };
        Ok(Nccl {
            rank,
            world,
            stream,
            comm: Arc::new(comm),
            timeout,
            calls: AtomicU64::new(0),
            broken: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Copies `buf` to the device and runs `collective` on it there; the
    /// wait for the result (see the module documentation).
    fn submit<T: DeviceRepr + Send + 'static>(
        &self,
        op: &'static str,
        buf: &[T],
        collective: impl FnOnce(sys::ncclComm_t, *mut c_void, sys::cudaStream_t) -> Result<(), String>,
    ) -> Result<impl FnOnce() -> Result<Vec<T>, Error> + Send + 'static, Error> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if self.broken.load(Ordering::SeqCst) {
            return Err(error(
                op,
                format!("call {call}: an earlier collective failed; the communicator is aborted"),
            ));
        }
        let fail = |m: String| error(op, format!("call {call}: {m}"));
        let mut data: CudaSlice<T> = self
            .stream
            .clone_htod(buf)
            .map_err(|e| fail(format!("copy to the device: {e}")))?;
        {
            let guard = self.comm.0.lock().unwrap_or_else(|e| e.into_inner());
            let comm = guard.ok_or_else(|| fail("the communicator is aborted".into()))?;
            let (ptr, _record) =
                cudarc::driver::DevicePtrMut::device_ptr_mut(&mut data, &self.stream);
            collective(comm, ptr as *mut c_void, self.stream.cu_stream() as _).map_err(fail)?;
        }
        let done: CudaEvent = self
            .stream
            .record_event(None)
            .map_err(|e| fail(format!("an event: {e}")))?;
        let (stream, comm, broken, timeout, rank) = (
            self.stream.clone(),
            self.comm.clone(),
            self.broken.clone(),
            self.timeout,
            self.rank,
        );
        Ok(move || {
            let start = Instant::now();
            let failed = loop {
                match done.try_is_complete() {
                    Ok(true) => break None,
                    Ok(false) => {}
                    Err(e) => break Some(format!("the device reported {e}")),
                }
                if let Some(e) = comm.async_error() {
                    break Some(format!("NCCL reported {e}"));
                }
                if start.elapsed() > timeout {
                    break Some(format!(
                        "rank {rank} waited {timeout:?}; another rank did not arrive"
                    ));
                }
                std::thread::sleep(Duration::from_micros(50));
            };
            if let Some(m) = failed {
                broken.store(true, Ordering::SeqCst);
                comm.abort();
                return Err(error(op, format!("call {call}: {m}")));
            }
            stream
                .clone_dtoh(&data)
                .map_err(|e| error(op, format!("call {call}: copy from the device: {e}")))
        })
    }

    /// An all-reduce (sum) of `buf`, of NCCL type `dtype`, started.
    fn all_reduce<T: DeviceRepr + Send + 'static>(
        &self,
        buf: &[T],
        dtype: sys::ncclDataType_t,
    ) -> Result<impl FnOnce() -> Result<Vec<T>, Error> + Send + 'static, Error> {
        let n = buf.len();
        self.submit("all_reduce", buf, move |comm, ptr, stream| {
            // SAFETY: `ptr` holds `n` values of `dtype` on the device,
            // ordered on `stream`.
            status(
                unsafe {
                    result::all_reduce(ptr, ptr, n, dtype, sys::ncclRedOp_t::ncclSum, comm, stream)
                },
                "ncclAllReduce",
            )
        })
    }
}

/// An NCCL status as a message.
fn status(r: Result<result::NcclStatus, result::NcclError>, what: &str) -> Result<(), String> {
    r.map(|_| ()).map_err(|e| format!("{what}: {e:?}"))
}

impl Collective for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce_sum_start(&self, buf: Values) -> Result<PendingReduce, Error> {
        if buf.is_empty() {
            // Every rank passes the same length: all skip it alike.
            return Ok(PendingReduce::new(move || Ok(buf)));
        }
        Ok(match buf {
            Values::F32(v) => {
                let wait = self.all_reduce(&v, sys::ncclDataType_t::ncclFloat32)?;
                PendingReduce::new(move || wait().map(Values::F32))
            }
            Values::F64(v) => {
                let wait = self.all_reduce(&v, sys::ncclDataType_t::ncclFloat64)?;
                PendingReduce::new(move || wait().map(Values::F64))
            }
        })
    }

    fn broadcast(&self, buf: &mut [f64], root: usize) -> Result<(), Error> {
        check_root(root, self.world)?;
        let n = buf.len();
        if n == 0 {
            return Ok(());
        }
        let got = self.submit("broadcast", buf, |comm, ptr, stream| {
            // SAFETY: as in `all_reduce_sum_start`.
            status(
                unsafe {
                    result::broadcast(
                        ptr,
                        ptr,
                        n,
                        sys::ncclDataType_t::ncclFloat64,
                        root as i32,
                        comm,
                        stream,
                    )
                },
                "ncclBroadcast",
            )
        })?()?;
        buf.copy_from_slice(&got);
        Ok(())
    }

    fn barrier(&self) -> Result<(), Error> {
        self.all_reduce_sum(&mut [0.0])
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        self.comm.abort();
    }
}
