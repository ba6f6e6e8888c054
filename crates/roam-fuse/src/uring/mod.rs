//! FUSE over io_uring (Linux 6.14+): the kernel hands each request to a ring entry of the
//! queue of the CPU the requesting program runs on, and that entry's thread, kept on the
//! same CPU, answers it. Through `/dev/fuse` each request instead wakes a reader thread,
//! often on the other CPU, which on this project's machines costs more than roam's whole
//! answer (docs/BENCHMARKS.md).
//!
//! The protocol (the kernel's `fs/fuse/dev_uring.c`, libfuse's `lib/fuse_uring.c`): after
//! a `FUSE_INIT` that accepted `FUSE_OVER_IO_URING`, each ring entry is registered with
//! `FUSE_IO_URING_CMD_REGISTER`, an `IORING_OP_URING_CMD` on the FUSE device naming the
//! queue and the entry's two buffers; its completion brings a request, and
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH` sends the reply and waits for the next. Until
//! every queue has an entry the kernel holds requests back; a refused registration turns
//! io_uring off for the connection, and requests go through `/dev/fuse` again.
//! `FORGET` and `INTERRUPT` always go through `/dev/fuse`, so fuser's readers stay.
//!
//! Each entry has a thread and a ring of its own: a request that waits for a server holds
//! one entry, as it holds one worker of the `/dev/fuse` transport, and no lock is shared
//! between entries. The rings are made before the `FUSE_INIT` handshake, so io_uring is
//! only asked for when they exist (once asked for, the kernel waits for them).

mod abi;
mod serve;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{mpsc, Arc};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::counts::Counts;
use crate::Roamfs;
use abi::{Header, CMD_COMMIT_AND_FETCH, CMD_REGISTER, HEADER_LEN};

/// The kernel's switch for FUSE over io_uring (root may write `Y` to it).
pub const PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// The largest request payload: `max_write`, and the most a read asks for (the kernel's
/// default limit of 256 pages). The kernel refuses entries with smaller buffers.
pub const MAX_PAYLOAD: usize = 1 << 20;

/// Whether the kernel lets FUSE servers use io_uring; `None` when it has no such setting.
pub fn enabled() -> Option<bool> {
    let v = std::fs::read_to_string(PARAMETER).ok()?;
    Some(v.trim() == "Y")
}

/// The kernel's queues: one per possible CPU (`num_possible_cpus`), numbered as the CPUs.
fn queues() -> usize {
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    possible
        .trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max()
        .map_or(1, |last| last + 1)
}

/// What a ring thread is told after the handshake: the device to register on, or nothing
/// (io_uring was not agreed on; the thread ends).
type Go = Option<Arc<OwnedFd>>;

/// Ring entries with their threads, made and waiting for the handshake.
pub struct Rings {
    go: Vec<mpsc::Sender<Go>>,
    registered: mpsc::Receiver<bool>,
    pub queues: usize,
    pub per_queue: usize,
}

impl Rings {
    /// `per_queue` entries for each queue, each with its thread and ring. Fails when the
    /// kernel setting is off or a ring cannot be made (io_uring disabled, no memory).
    pub fn prepare(
        fs: &Arc<Roamfs>,
        counts: &Arc<Counts>,
        per_queue: usize,
    ) -> std::io::Result<Rings> {
        if enabled() != Some(true) {
            return Err(std::io::Error::other(format!("{PARAMETER} is not Y")));
        }
        let (queues, per_queue) = (queues(), per_queue.max(1));
        let (made_tx, made) = mpsc::channel();
        let (registered_tx, registered) = mpsc::channel();
        let mut go = Vec::new();
        for qid in 0..queues {
            for i in 0..per_queue {
                let (go_tx, go_rx) = mpsc::channel();
                let entry = Entry {
                    qid: qid as u16,
                    fs: fs.clone(),
                    counts: counts.clone(),
                };
                let (made_tx, registered_tx) = (made_tx.clone(), registered_tx.clone());
                std::thread::Builder::new()
                    .name(format!("roam-uring-{qid}.{i}"))
                    .spawn(move || entry.run(&made_tx, &go_rx, &registered_tx))?;
                go.push(go_tx);
            }
        }
        let rings = Rings {
            go,
            registered,
            queues,
            per_queue,
        };
        // Only the threads hold senders now: one that dies unheard ends the wait.
        drop(made_tx);
        for _ in 0..queues * per_queue {
            // A thread that failed to make its ring says so; dropping `rings` ends the rest.
            made.recv().map_err(std::io::Error::other)??;
        }
        Ok(rings)
    }

    /// Registers every entry on `device` once the kernel agreed to io_uring (`granted`),
    /// else ends the threads. Whether requests now come through the rings.
    pub fn start(self, device: &Arc<OwnedFd>, granted: bool) -> bool {
        for go in &self.go {
            let _ = go.send(granted.then(|| device.clone()));
        }
        granted && (0..self.go.len()).all(|_| self.registered.recv().unwrap_or(false))
    }
}

/// One ring entry: its queue and what answers its requests.
struct Entry {
    qid: u16,
    fs: Arc<Roamfs>,
    counts: Arc<Counts>,
}

type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

impl Entry {
    /// The thread of the entry: makes its ring, waits for the handshake, registers, then
    /// answers requests until the connection ends.
    fn run(
        self,
        made: &mpsc::Sender<std::io::Result<()>>,
        go: &mpsc::Receiver<Go>,
        registered: &mpsc::Sender<bool>,
    ) {
        pin_to_cpu(self.qid.into());
        // One thread submits to this ring, and only waits in it: the kernel may run the
        // completion work when the thread next enters it instead of interrupting it.
        let ring = Ring::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .build(2);
        let mut ring = match ring {
            Ok(r) => {
                let _ = made.send(Ok(()));
                r
            }
            Err(e) => {
                let _ = made.send(Err(e));
                return;
            }
        };
        let Ok(Some(device)) = go.recv() else {
            return;
        };
        let mut header = Box::new(Header([0; HEADER_LEN]));
        let mut payload = vec![0u8; MAX_PAYLOAD];
        let iov = Box::new([
            libc::iovec {
                iov_base: header.0.as_mut_ptr().cast(),
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: MAX_PAYLOAD,
            },
        ]);
        let register = command(device.as_raw_fd(), CMD_REGISTER, self.qid, 0, Some(&*iov));
        let ok = push(&mut ring, &register) && ring.submit().is_ok();
        // A refused registration completes at once; a good one only with a request.
        let first = ring.completion().next();
        let refused = first.as_ref().is_some_and(|c| c.result() < 0);
        if let Some(c) = first.as_ref().filter(|_| refused) {
            let e = std::io::Error::from_raw_os_error(-c.result());
            tracing::info!("FUSE over io_uring: queue {} refused: {e}", self.qid);
        }
        let _ = registered.send(ok && !refused);
        if !ok || refused {
            return;
        }
        self.serve(
            &mut ring,
            first,
            device.as_raw_fd(),
            &mut header,
            &mut payload,
        );
        // The buffers are the kernel's until here.
        drop(iov);
    }

    /// Answers each request the ring brings (`first` came already) and commits the reply
    /// with the next fetch.
    fn serve(
        &self,
        ring: &mut Ring,
        mut first: Option<cqueue::Entry>,
        device: RawFd,
        header: &mut Header,
        payload: &mut [u8],
    ) {
        loop {
            let Some(c) = first.take().or_else(|| ring.completion().next()) else {
                match ring.submit_and_wait(1) {
                    Ok(_) => continue,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => {
                        tracing::warn!("FUSE over io_uring: queue {}: {e}", self.qid);
                        return;
                    }
                }
            };
            // ENOTCONN, ECANCELED: the connection ended (unmounted, aborted).
            if c.result() < 0 {
                return;
            }
            serve::serve(&self.fs, &self.counts, header, payload);
            let commit = command(
                device,
                CMD_COMMIT_AND_FETCH,
                self.qid,
                header.commit_id(),
                None,
            );
            if !push(ring, &commit) {
                return;
            }
        }
    }
}

/// Queues `sqe`; false if the ring is full (it never is: one command is out at a time).
fn push(ring: &mut Ring, sqe: &squeue::Entry128) -> bool {
    // SAFETY: the buffers the command names (the entry's iovecs) outlive the ring's use.
    unsafe { ring.submission().push(sqe).is_ok() }
}

/// An `IORING_OP_URING_CMD` for the FUSE device: `struct fuse_uring_cmd_req` in the
/// command area, and for a registration the entry's two buffers.
fn command(
    device: RawFd,
    op: u32,
    qid: u16,
    commit_id: u64,
    iov: Option<&[libc::iovec; 2]>,
) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    let sqe = opcode::UringCmd80::new(types::Fd(device), op)
        .cmd(cmd)
        .addr(iov.map(|i| i.as_ptr() as u64));
    // The crate has no setter for the SQE's length field (offset 24), which a
    // registration sets to its two iovecs.
    // SAFETY: `Entry128` is `repr(C)`, 128 bytes of plain data.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe.build()) };
    let len: u32 = if iov.is_some() { 2 } else { 0 };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// Keeps the calling thread on `cpu`, where the requests of its queue come from. An
/// offline CPU's queue gets no requests; its thread may run anywhere.
fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays within it for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu < libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
        }
    }
}
