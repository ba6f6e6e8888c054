//! The wasm technology: WebAssembly in wasmtime, compiled by Cranelift or interpreted by
//! Pulley. Software fault isolation: the extension's loads and stores stay inside its linear
//! memory. Each call gets a fresh instance (that *is* the rollback), a fuel budget (an
//! instruction count), the wall-clock deadline every technology has (wasmtime's epochs,
//! ticked by a thread per engine), a memory limit, and no WASI capability: every WASI import
//! answers ENOTCAPABLE, except writes to stderr, which are kept (bounded) to explain a trap.
//!
//! A fresh instance per call costs little because everything that can be done once is done
//! at load: the module is compiled and its imports linked once (`InstancePre`), the exports
//! are looked up once (by index, not by name), and instances come from wasmtime's pooling
//! allocator: memory slots are reserved once and reused, a slot's memory starts as a
//! copy-on-write image of the module's data, and a finished call's dirty pages are found with
//! Linux's `PAGEMAP_SCAN` and copied back from the image in place (they stay resident, so the
//! next call takes no page faults) instead of unmapping and remapping the slot.

use crate::gate::Gate;
use crate::runner::{reply_len, Runner};
use crate::{Fault, Limits};
use roam_ext_abi::LEN_PREFIX;
use std::path::Path;
use wasmtime::{
    Caller, Config, Enabled, Engine, Extern, ExternType, InstanceAllocationStrategy, InstancePre,
    Linker, Memory, Module, ModuleExport, PoolingAllocationConfig, Store, StoreLimits,
    StoreLimitsBuilder, Trap, Val,
};

const WASI: &str = "wasi_snapshot_preview1";
/// WASI errno `notcapable`: the answer to every request for the outside world.
const ENOTCAPABLE: i32 = 76;
/// WASI errno `badf`: the answer to every descriptor call (the extension has none; wasi-libc
/// reads it as "no preopened directories").
const EBADF: i32 = 8;
/// Bytes of stderr kept per call.
const STDERR_KEPT: usize = 2048;
/// Instances of one extension alive at once (pool slots); further calls wait for a slot.
/// Each slot reserves address space only (4 GiB plus guard), not memory.
const SLOTS: u32 = 32;
/// Dirty bytes of a slot's memory reset in place (resident) after a call; beyond that the
/// rest is given back to the kernel. A call that touches more (a memory hog) pays page faults
/// next time, not roam's memory.
const KEEP_RESIDENT: usize = 4 << 20;
/// How often the engine's epoch advances: the granularity of a call's deadline.
const TICK: std::time::Duration = std::time::Duration::from_millis(10);

pub(crate) struct Wasm {
    pre: InstancePre<Ctx>,
    exports: Exports,
    /// Bounds concurrent calls to the pool's slots.
    slots: Gate,
}

/// The exports a call uses, looked up once.
struct Exports {
    memory: ModuleExport,
    alloc: ModuleExport,
    call: ModuleExport,
    /// A WASI reactor's constructors, run once per instance.
    initialize: Option<ModuleExport>,
}

/// Per-call host state.
struct Ctx {
    limits: StoreLimits,
    stderr: Vec<u8>,
}

impl Wasm {
    pub(crate) fn load(path: &Path, interpreted: bool, limits: &Limits) -> Result<Wasm, Fault> {
        let load = |e: wasmtime::Error| Fault::Load(format!("{e:#}"));
        let engine = Engine::new(&config(interpreted, limits).map_err(load)?).map_err(load)?;
        tick(&engine);
        let module = Module::from_file(&engine, path).map_err(load)?;
        let mut linker = Linker::new(&engine);
        deny_wasi(&mut linker, &module).map_err(load)?;
        let pre = linker.instantiate_pre(&module).map_err(load)?;
        let export = |name: &str| {
            module
                .get_export_index(name)
                .ok_or_else(|| Fault::Load(format!("the module exports no `{name}`")))
        };
        let exports = Exports {
            memory: export("memory")?,
            alloc: export("roam_alloc")?,
            call: export("roam_call")?,
            initialize: module.get_export_index("_initialize"),
        };
        Ok(Wasm {
            pre,
            exports,
            slots: Gate::new(SLOTS as usize),
        })
    }

    fn run(
        &self,
        store: &mut Store<Ctx>,
        request: &[u8],
        limits: &Limits,
    ) -> wasmtime::Result<Result<Vec<u8>, Fault>> {
        let instance = self.pre.instantiate(&mut *store)?;
        let mut export = |e: &ModuleExport| {
            instance
                .get_module_export(&mut *store, e)
                .ok_or_else(|| wasmtime::format_err!("export missing from the instance"))
        };
        let init = self
            .exports
            .initialize
            .as_ref()
            .map(&mut export)
            .transpose()?;
        let memory = export(&self.exports.memory)?;
        let alloc = export(&self.exports.alloc)?;
        let call = export(&self.exports.call)?;
        let memory = memory
            .into_memory()
            .ok_or_else(|| wasmtime::format_err!("`memory` is not a memory"))?;
        let func = |e: Extern| {
            e.into_func()
                .ok_or_else(|| wasmtime::format_err!("an entry point is not a function"))
        };
        if let Some(init) = init {
            func(init)?
                .typed::<(), ()>(&*store)?
                .call(&mut *store, ())?;
        }
        let alloc = func(alloc)?.typed::<u32, u32>(&*store)?;
        let call = func(call)?.typed::<(u32, u32), u32>(&*store)?;
        let len = u32::try_from(request.len())?;
        let at = alloc.call(&mut *store, len)?;
        memory.write(&mut *store, at as usize, request)?;
        let out = call.call(&mut *store, (at, len))? as usize;
        Ok(read_reply(&memory, store, out, limits))
    }
}

/// Advances `engine`'s epoch every [`TICK`] until the engine is dropped, so that a call's
/// deadline holds in wall-clock time (an interpreted loop runs far fewer instructions per
/// second than a compiled one: fuel alone let Pulley run 15 times longer).
fn tick(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("roam-ext-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(TICK);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no deadline thread for a wasm extension ({e}): fuel alone bounds it");
    }
}

/// The epoch ticks a call may run: its deadline, rounded up.
fn deadline_ticks(limits: &Limits) -> u64 {
    (limits.timeout.as_nanos().div_ceil(TICK.as_nanos()) as u64).max(1)
}

/// The engine's configuration: fuel and epochs (the instruction budget and the deadline),
/// and the pooling allocator sized for `limits`.
fn config(interpreted: bool, limits: &Limits) -> wasmtime::Result<Config> {
    let mut config = Config::new();
    config.consume_fuel(true);
    config.epoch_interruption(true);
    // A trap is told in one line (with what the extension said), not a frame per line.
    config.wasm_backtrace_max_frames(None);
    if interpreted {
        config.target("pulley64")?;
    }
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(SLOTS)
        .total_memories(SLOTS)
        .total_tables(SLOTS)
        .max_memory_size(limits.memory)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        .pagemap_scan(Enabled::Auto);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Ok(config)
}

/// Copies the length-prefixed reply at `out` out of linear memory, bounds-checked.
fn read_reply(
    memory: &Memory,
    store: &Store<Ctx>,
    out: usize,
    limits: &Limits,
) -> Result<Vec<u8>, Fault> {
    let outside = || Fault::Trap("reply lies outside the extension's memory".into());
    let data = memory.data(store);
    let prefix = data.get(out..out + LEN_PREFIX).ok_or_else(outside)?;
    let len = reply_len(prefix.try_into().map_err(|_| outside())?, limits)?;
    Ok(data
        .get(out + LEN_PREFIX..out + LEN_PREFIX + len)
        .ok_or_else(outside)?
        .to_vec())
}

impl Runner for Wasm {
    fn call(&self, request: &[u8], limits: &Limits) -> Result<Vec<u8>, Fault> {
        let _slot = self.slots.enter();
        let store_limits = StoreLimitsBuilder::new()
            .memory_size(limits.memory)
            .instances(1)
            .build();
        let mut store = Store::new(
            self.pre.module().engine(),
            Ctx {
                limits: store_limits,
                stderr: Vec::new(),
            },
        );
        store.limiter(|ctx| &mut ctx.limits);
        store.set_fuel(limits.fuel).map_err(Fault::host)?;
        store.set_epoch_deadline(deadline_ticks(limits));
        store.epoch_deadline_trap();
        match self.run(&mut store, request, limits) {
            Ok(result) => result,
            Err(e) => Err(trap_fault(&e, &store.data().stderr, limits)),
        }
    }
}

/// A wasmtime error as a fault, with what the extension wrote to stderr.
fn trap_fault(e: &wasmtime::Error, stderr: &[u8], limits: &Limits) -> Fault {
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => return Fault::OutOfFuel,
        Some(Trap::Interrupt) => return Fault::Timeout(limits.timeout),
        _ => {}
    }
    let said = String::from_utf8_lossy(stderr);
    let said = said.trim();
    match said.is_empty() {
        true => Fault::Trap(format!("{e:#}")),
        false => Fault::Trap(format!("{e:#}; it said: {said}")),
    }
}

/// Defines every WASI import the module has as a refusal (EBADF for descriptor calls,
/// ENOTCAPABLE for the rest); `proc_exit` traps and `fd_write` to stderr is kept. Anything else the module imports is left undefined, so such
/// a module fails to load instead of running with surprises.
fn deny_wasi(linker: &mut Linker<Ctx>, module: &Module) -> wasmtime::Result<()> {
    for import in module.imports().filter(|i| i.module() == WASI) {
        let ExternType::Func(ty) = import.ty() else {
            continue;
        };
        let name = import.name().to_string();
        linker.func_new(
            WASI,
            import.name(),
            ty,
            move |caller, args, results| match name.as_str() {
                "proc_exit" => Err(wasmtime::format_err!(
                    "the extension called proc_exit({:?})",
                    args.first().and_then(Val::i32)
                )),
                "fd_write" if args.first().and_then(Val::i32) == Some(2) => {
                    keep_stderr(caller, args, results)
                }
                n if n.starts_with("fd_") => refuse(results, EBADF),
                _ => refuse(results, ENOTCAPABLE),
            },
        )?;
    }
    Ok(())
}

fn refuse(results: &mut [Val], errno: i32) -> wasmtime::Result<()> {
    if let Some(r) = results.first_mut() {
        *r = Val::I32(errno);
    }
    Ok(())
}

/// `fd_write(2, iovs, n, nwritten)`: append the iovecs to the kept stderr (bounded).
fn keep_stderr(
    mut caller: Caller<'_, Ctx>,
    args: &[Val],
    results: &mut [Val],
) -> wasmtime::Result<()> {
    let arg = |i: usize| args.get(i).and_then(Val::i32).unwrap_or(0) as u32 as usize;
    let (iovs, n, nwritten) = (arg(1), arg(2), arg(3));
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        return refuse(results, EBADF);
    };
    let (data, ctx) = memory.data_and_store_mut(&mut caller);
    let mut total = 0u32;
    for i in 0..n.min(64) {
        let word = |at: usize| {
            data.get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        let (Some(ptr), Some(len)) = (word(iovs + 8 * i), word(iovs + 8 * i + 4)) else {
            break;
        };
        let Some(bytes) = data.get(ptr..ptr.saturating_add(len)) else {
            break;
        };
        let room = STDERR_KEPT.saturating_sub(ctx.stderr.len());
        ctx.stderr
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
        total = total.saturating_add(len as u32);
    }
    if let Some(slot) = data.get_mut(nwritten..nwritten + 4) {
        slot.copy_from_slice(&total.to_le_bytes());
    }
    if let Some(r) = results.first_mut() {
        *r = Val::I32(0);
    }
    Ok(())
}
