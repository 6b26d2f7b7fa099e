//! Programs of Python reactors, run by `hprm_node`.
//!
//! The Python package declares a program through [`NativeProgram`] one
//! piece at a time (federates, reactors, ports, reactions, connections);
//! each piece is kept as a typed `hprm_node` handle in a table, and Python
//! refers to it by its index there. Port values are Python objects
//! ([`PyVal`]): inside a federate they pass as they are (no copy, no
//! serialization); across federates they go through `codec` (the same wire
//! format as Rust ports, so Rust and Python federates can be connected).
//!
//! A reaction body is a Python callable `(instance, ctx)`; the runtime
//! calls it with the GIL held only for the call. `ctx` is a [`Context`]
//! valid during that call only: it points at the runtime's `Ctx`, and is
//! invalidated when the call returns.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hprm_node::payload::{Decoder, Encoder, PayloadError};
use hprm_node::{
    Ctx, Input, LogicalAction, Output, PhysicalAction, Program, ReactorId, Shutdown, Startup, Timer, TriggerId, Value,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// A Python object as a port or action value.
pub struct PyVal(pub PyObject);

/// Network encoding of a Python port value (`hprm_node::EncodeFn`).
fn encode_port(v: &Value, enc: &Encoder, deliveries: u32) -> Result<Vec<u8>, PayloadError> {
    let Some(PyVal(obj)) = v.downcast_ref::<PyVal>() else {
        return Err(PayloadError::Serialize {
            message: "a Python port holds a value that is not a Python object".into(),
        });
    };
    Python::with_gil(|py| crate::codec::encode(py, obj.bind(py), enc, deliveries).map_err(|e| store_lost_or(py, e)))
        .map_err(|e| e.unwrap_or_else(|e| PayloadError::Serialize { message: e.to_string() }))
}

/// A codec error as the runtime counts it: [`PayloadError::StoreLost`]
/// when the store died (a value lost, counted, not a failure), else the
/// Python exception.
fn store_lost_or(py: Python<'_>, e: PyErr) -> Result<PayloadError, PyErr> {
    if e.is_instance_of::<crate::codec::StoreLostError>(py) {
        Ok(PayloadError::StoreLost { reason: e.value(py).to_string() })
    } else {
        Err(e)
    }
}

/// Network decoding into a Python port value (`hprm_node::DecodeFn`).
fn decode_port(bytes: &[u8], dec: &Decoder) -> Result<Value, PayloadError> {
    Python::with_gil(|py| crate::codec::decode(py, bytes, dec, false).map_err(|e| store_lost_or(py, e)))
        .map(|obj| Arc::new(PyVal(obj)) as Value)
        .map_err(|e| {
            e.unwrap_or_else(|e| PayloadError::Mismatch { type_name: "a Python value", message: e.to_string() })
        })
}

/// One declared thing, by its index in [`NativeProgram`]'s table.
#[derive(Clone, Copy)]
enum Handle {
    Input(Input<PyVal>),
    Output(Output<PyVal>),
    Timer(Timer),
    Logical(LogicalAction<PyVal>),
    Physical(PhysicalAction<PyVal>),
    Startup(Startup),
    Shutdown(Shutdown),
}

impl Handle {
    fn id(self) -> TriggerId {
        match self {
            Handle::Input(h) => h.into(),
            Handle::Output(h) => h.into(),
            Handle::Timer(h) => h.into(),
            Handle::Logical(h) => h.into(),
            Handle::Physical(h) => h.into(),
            Handle::Startup(h) => h.into(),
            Handle::Shutdown(h) => h.into(),
        }
    }
}

/// What happens when a Python reaction raises.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnError {
    /// The federate fails (reports FAILED; the launcher names it).
    Stop,
    /// The error is logged and the program goes on.
    Continue,
}

/// How the program's reactions are run.
#[derive(Clone, Copy)]
struct Policy {
    on_error: OnError,
    /// Whether large arrays made in a reaction are born in the store
    /// (`crate::store_memory`).
    store_arrays: bool,
}

/// A program being declared from Python. Not pinned to the thread that
/// made it: an application may declare it on one thread and run it on
/// another, and whichever thread drops it (the garbage collector's, in a
/// cycle) frees it; pyo3's borrow flag keeps uses one at a time.
#[pyclass]
pub struct NativeProgram {
    /// None once run. In a mutex only so that the class is `Sync`, as pyo3
    /// asks of a class any thread may hold (`Program`'s reaction bodies and
    /// reactor states are `Send`, not `Sync`); every use is through `&mut self`
    /// (`Mutex::get_mut`), so it is never locked.
    program: Mutex<Option<Program>>,
    federates: Vec<hprm_node::FederateId>,
    reactors: Vec<ReactorId>,
    /// `federate.reactor` of each reactor, for messages.
    reactor_paths: Vec<String>,
    handles: Vec<Handle>,
    /// Each handle's name as the Python class declares it.
    names: Vec<String>,
    policy: Policy,
}

impl NativeProgram {
    fn program(&mut self) -> PyResult<&mut Program> {
        self.slot()
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("this program has already been run; build a new one"))
    }

    /// The program, taken to be run: it runs once.
    fn take_program(&mut self) -> PyResult<Program> {
        self.slot().take().ok_or_else(|| PyRuntimeError::new_err("this program has already been run"))
    }

    fn slot(&mut self) -> &mut Option<Program> {
        // Never locked, so never poisoned; `into_inner` only satisfies the type.
        self.program.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn reactor_id(&self, r: usize) -> PyResult<ReactorId> {
        self.reactors.get(r).copied().ok_or_else(|| PyValueError::new_err(format!("no reactor {r}")))
    }

    fn handle(&self, h: usize) -> PyResult<Handle> {
        self.handles.get(h).copied().ok_or_else(|| PyValueError::new_err(format!("no port, timer or action {h}")))
    }

    fn push(&mut self, h: Handle, name: &str) -> usize {
        self.handles.push(h);
        self.names.push(name.to_string());
        self.handles.len() - 1
    }
}

fn ns(d: i64) -> Duration {
    Duration::from_nanos(d.max(0) as u64)
}

#[pymethods]
impl NativeProgram {
    /// `coordination`: "centralized" or "decentralized" (then `stp_ns`).
    #[new]
    #[pyo3(signature = (name, coordination="centralized", stp_ns=0, threshold=65536, timeout_ns=None, on_error="stop", store_arrays=true))]
    fn new(
        name: &str,
        coordination: &str,
        stp_ns: i64,
        threshold: usize,
        timeout_ns: Option<i64>,
        on_error: &str,
        store_arrays: bool,
    ) -> PyResult<NativeProgram> {
        let mut p = Program::new(name);
        match coordination {
            "centralized" => {}
            "decentralized" => {
                p.coordination(hprm_node::Coordination::Decentralized { stp: ns(stp_ns) });
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "coordination {other:?} is neither \"centralized\" nor \"decentralized\""
                )))
            }
        }
        p.threshold(threshold);
        if let Some(t) = timeout_ns {
            p.timeout(ns(t));
        }
        let on_error = match on_error {
            "stop" => OnError::Stop,
            "continue" => OnError::Continue,
            other => {
                return Err(PyValueError::new_err(format!("on_error {other:?} is neither \"stop\" nor \"continue\"")))
            }
        };
        Ok(NativeProgram {
            program: Mutex::new(Some(p)),
            federates: Vec::new(),
            reactors: Vec::new(),
            reactor_paths: Vec::new(),
            handles: Vec::new(),
            names: Vec::new(),
            policy: Policy { on_error, store_arrays },
        })
    }

    fn federate(&mut self, name: &str) -> PyResult<usize> {
        let f = self.program()?.federate(name);
        self.federates.push(f);
        Ok(self.federates.len() - 1)
    }

    /// `Program.restart_on_failure`: the launcher restarts federate `fed`
    /// when it fails.
    #[pyo3(signature = (fed, max_restarts=None))]
    fn restart_on_failure(&mut self, fed: usize, max_restarts: Option<u32>) -> PyResult<()> {
        let fid = *self.federates.get(fed).ok_or_else(|| PyValueError::new_err(format!("no federate {fed}")))?;
        self.program()?.restart_on_failure(fid, max_restarts);
        Ok(())
    }

    /// `Program.host`: a host of a program that spans several.
    #[pyo3(signature = (name, address, link=None))]
    fn host(&mut self, name: &str, address: &str, link: Option<String>) -> PyResult<()> {
        self.program()?.host(name, address, link);
        Ok(())
    }

    /// `Federate.on`: federate `fed` runs on host `host`.
    fn run_on(&mut self, fed: usize, host: &str) -> PyResult<()> {
        let fid = *self.federates.get(fed).ok_or_else(|| PyValueError::new_err(format!("no federate {fed}")))?;
        self.program()?.run_on(fid, host);
        Ok(())
    }

    /// `Program.rti_on`: the RTI's host, and its port there.
    #[pyo3(signature = (host, port=None))]
    fn rti_on(&mut self, host: &str, port: Option<u16>) -> PyResult<()> {
        self.program()?.rti_on(host, port);
        Ok(())
    }

    /// `Federate.realtime`: federate `fed`'s priority, policy (`"fifo"`,
    /// `"rr"`), CPUs (`"0,2-3"`) and its TCP connections' marks
    /// (`socket_priority`, `dscp`: a number or a name such as `"EF"`),
    /// applied by its process as it starts.
    #[pyo3(signature = (fed, priority=None, policy=None, cpus=None, best_effort=false, socket_priority=None, dscp=None))]
    #[allow(clippy::too_many_arguments)]
    fn realtime(
        &mut self,
        fed: usize,
        priority: Option<u8>,
        policy: Option<&str>,
        cpus: Option<&str>,
        best_effort: bool,
        socket_priority: Option<u8>,
        dscp: Option<&str>,
    ) -> PyResult<()> {
        use hprm_node::realtime::{CpuList, Dscp, Policy, Realtime, SocketMarks};
        let fid = *self.federates.get(fed).ok_or_else(|| PyValueError::new_err(format!("no federate {fed}")))?;
        if let Some(p) = priority.filter(|p| !(1..=99).contains(p)) {
            return Err(PyValueError::new_err(format!(
                "priority {p} is out of range; real-time priorities are 1 (lowest) to 99"
            )));
        }
        if priority.is_none() && cpus.is_none() && socket_priority.is_none() && dscp.is_none() {
            return Err(PyValueError::new_err(
                "give a priority (1-99), cpus (\"0,2-3\"), socket_priority (0-6) or dscp (0-63 or a name such as \"EF\")",
            ));
        }
        if let Some(p) = socket_priority.filter(|&p| p > 15) {
            return Err(PyValueError::new_err(format!(
                "socket_priority {p} is out of range: 0 to 6, or up to 15 with CAP_NET_ADMIN"
            )));
        }
        let dscp = dscp.map(str::parse::<Dscp>).transpose().map_err(PyValueError::new_err)?;
        if policy.is_some() && priority.is_none() {
            return Err(PyValueError::new_err("a policy needs a priority (1-99)"));
        }
        let policy = policy.map(str::parse::<Policy>).transpose().map_err(PyValueError::new_err)?.unwrap_or_default();
        let cpus = cpus.map(str::parse::<CpuList>).transpose().map_err(|e| PyValueError::new_err(e.to_string()))?;
        let marks = SocketMarks { priority: socket_priority, dscp };
        self.program()?.realtime(fid, Realtime { priority, policy, cpus, marks, best_effort });
        Ok(())
    }

    /// A reactor of federate `fed` whose state is the Python `instance`.
    fn reactor(&mut self, fed: usize, name: &str, instance: PyObject) -> PyResult<usize> {
        let fid = *self.federates.get(fed).ok_or_else(|| PyValueError::new_err(format!("no federate {fed}")))?;
        let id = self.program()?.reactor(fid, name, instance).id();
        let federate = self.program()?.federate_names().get(fed).map(|f| f.to_string()).unwrap_or_default();
        self.reactors.push(id);
        self.reactor_paths.push(format!("{federate}.{name}"));
        Ok(self.reactors.len() - 1)
    }

    fn input(&mut self, reactor: usize, name: &str) -> PyResult<usize> {
        let r = self.reactor_id(reactor)?;
        let h = self.program()?.reactor_mut::<PyObject>(r).input_with::<PyVal>(name, decode_port);
        Ok(self.push(Handle::Input(h), name))
    }

    #[pyo3(signature = (reactor, name, backpressure=None))]
    fn output(&mut self, reactor: usize, name: &str, backpressure: Option<&str>) -> PyResult<usize> {
        let r = self.reactor_id(reactor)?;
        let policy = backpressure
            .map(|text| {
                text.parse::<hprm_node::Backpressure>()
                    .map_err(|e| PyValueError::new_err(format!("output {name}: {e}")))
            })
            .transpose()?;
        let program = self.program()?;
        let h = program.reactor_mut::<PyObject>(r).output_with::<PyVal>(name, encode_port);
        if let Some(policy) = policy {
            program.backpressure(h, policy);
        }
        Ok(self.push(Handle::Output(h), name))
    }

    fn timer(&mut self, reactor: usize, name: &str, offset_ns: i64, period_ns: i64) -> PyResult<usize> {
        let r = self.reactor_id(reactor)?;
        let h = self.program()?.reactor_mut::<PyObject>(r).timer(name, ns(offset_ns), ns(period_ns));
        Ok(self.push(Handle::Timer(h), name))
    }

    fn logical_action(&mut self, reactor: usize, name: &str, min_delay_ns: i64) -> PyResult<usize> {
        let r = self.reactor_id(reactor)?;
        let h = self.program()?.reactor_mut::<PyObject>(r).logical_action::<PyVal>(name, ns(min_delay_ns));
        Ok(self.push(Handle::Logical(h), name))
    }

    fn physical_action(&mut self, reactor: usize, name: &str, min_delay_ns: i64) -> PyResult<usize> {
        let r = self.reactor_id(reactor)?;
        let h = self.program()?.reactor_mut::<PyObject>(r).physical_action_with::<PyVal>(
            name,
            ns(min_delay_ns),
            encode_port,
            decode_port,
        );
        Ok(self.push(Handle::Physical(h), name))
    }

    fn startup(&mut self, reactor: usize) -> PyResult<usize> {
        let r = self.reactor_id(reactor)?;
        let h = self.program()?.reactor_mut::<PyObject>(r).startup();
        Ok(self.push(Handle::Startup(h), "startup"))
    }

    fn shutdown(&mut self, reactor: usize) -> PyResult<usize> {
        let r = self.reactor_id(reactor)?;
        let h = self.program()?.reactor_mut::<PyObject>(r).shutdown();
        Ok(self.push(Handle::Shutdown(h), "shutdown"))
    }

    /// A reaction: `body(instance, ctx)`, optional deadline handler and
    /// tardy handler with the same signature.
    #[pyo3(signature = (reactor, name, triggers, sources, effects, body, deadline_ns=None, deadline_handler=None, tardy_handler=None))]
    #[allow(clippy::too_many_arguments)]
    fn reaction(
        &mut self,
        reactor: usize,
        name: &str,
        triggers: Vec<usize>,
        sources: Vec<usize>,
        effects: Vec<usize>,
        body: PyObject,
        deadline_ns: Option<i64>,
        deadline_handler: Option<PyObject>,
        tardy_handler: Option<PyObject>,
    ) -> PyResult<()> {
        let r = self.reactor_id(reactor)?;
        let triggers: Vec<Handle> = triggers.into_iter().map(|h| self.handle(h)).collect::<PyResult<_>>()?;
        let sources: Vec<Handle> = sources.into_iter().map(|h| self.handle(h)).collect::<PyResult<_>>()?;
        let declared = Arc::new(Declared {
            reaction: format!("{}.{name}", self.reactor_paths.get(reactor).map_or("?", String::as_str)),
            names: self.names.clone(),
            effects: effects.clone(),
        });
        let effects: Vec<Handle> = effects.into_iter().map(|h| self.handle(h)).collect::<PyResult<_>>()?;
        let policy = self.policy;
        let handles = Arc::new(self.handles.clone());
        let reaction = name.to_string();
        let mut rb = self.program()?.reactor_mut::<PyObject>(r);
        let mut b = rb.reaction(name);
        for t in triggers {
            b = b.trigger(t.id());
        }
        for s in sources {
            if let Handle::Input(i) = s {
                b = b.source(i);
            } else {
                return Err(PyValueError::new_err(format!("reaction {reaction}: only inputs can be sources")));
            }
        }
        for e in effects {
            b = b.effect(e.id());
        }
        if let Some(d) = deadline_ns {
            let handler = deadline_handler.ok_or_else(|| {
                PyValueError::new_err(format!("reaction {reaction} has a deadline but no deadline handler"))
            })?;
            b = b.deadline(ns(d), invoker(handler, handles.clone(), declared.clone(), policy));
        }
        if let Some(t) = tardy_handler {
            b = b.tardy(invoker(t, handles.clone(), declared.clone(), policy));
        }
        b.body(invoker(body, handles, declared, policy));
        Ok(())
    }

    #[pyo3(signature = (source, target, after_ns=None, physical=false))]
    fn connect(&mut self, source: usize, target: usize, after_ns: Option<i64>, physical: bool) -> PyResult<()> {
        let (Handle::Output(o), Handle::Input(i)) = (self.handle(source)?, self.handle(target)?) else {
            return Err(PyValueError::new_err("connect goes from an output to an input"));
        };
        let p = self.program()?;
        match (after_ns, physical) {
            (_, true) => p.connect_physical(o, i),
            (Some(d), false) => p.connect_after(o, i, ns(d)),
            (None, false) => p.connect(o, i),
        };
        Ok(())
    }

    /// Every problem of the program, or None.
    fn validate(&mut self) -> PyResult<Option<String>> {
        Ok(self.program()?.validate().err().map(|e| e.to_string()))
    }

    /// The program's graph as JSON (see `hprm_node::manifest`).
    fn manifest(&mut self) -> PyResult<String> {
        Ok(self.program()?.manifest().to_json())
    }

    fn federate_names(&mut self) -> PyResult<Vec<String>> {
        Ok(self.program()?.federate_names().into_iter().map(String::from).collect())
    }

    /// Runs one federate: from the launcher's environment when `federate`
    /// is None. Returns a dict summarising the run.
    #[pyo3(signature = (federate=None, fast=false))]
    fn run_federate(&mut self, py: Python<'_>, federate: Option<String>, fast: bool) -> PyResult<PyObject> {
        let program = self.take_program()?;
        let mut opts = match hprm_node::launch::options_from_env(&program) {
            Some(o) => o,
            None => {
                let name = match federate {
                    Some(n) => n,
                    None => program.federate_names().first().map(|s| s.to_string()).unwrap_or_default(),
                };
                hprm_node::RunOptions::new(name)
            }
        };
        opts.fast |= fast;
        // Python owns SIGINT (KeyboardInterrupt); the launcher's SIGTERM stops us cleanly.
        opts.handle_signals = std::env::var_os("HPRM_FEDERATE").is_some();
        let result = py.allow_threads(move || hprm_node::run_federate(program, opts));
        match result {
            Ok(r) => {
                let d = pyo3::types::PyDict::new(py);
                d.set_item("federate", r.federate)?;
                d.set_item("tags", r.tags)?;
                d.set_item("reactions", r.reactions)?;
                d.set_item("tardy", r.tardy)?;
                d.set_item("deadline_misses", r.deadline_misses)?;
                d.set_item("decode_errors", r.decode_errors)?;
                d.set_item("store_lost", r.losses.total(hprm_node::loss::Loss::StoreLost))?;
                d.set_item("problems", r.problems)?;
                let losses = pyo3::types::PyDict::new(py);
                for (port, counts) in &r.losses.0 {
                    let c = pyo3::types::PyDict::new(py);
                    for loss in hprm_node::loss::Loss::ALL {
                        c.set_item(loss.name(), counts.get(loss))?;
                    }
                    losses.set_item(port, c)?;
                }
                d.set_item("losses", losses)?;
                Ok(d.into_any().unbind())
            }
            Err(e) => Err(PyRuntimeError::new_err(e.to_string())),
        }
    }

    /// Launches every federate as a process running `argv` (the Python
    /// script with its arguments) or, for the federates named in
    /// `commands`, that command (e.g. a Rust federate binary), with a store
    /// (started with `store_args` besides its socket and memory, e.g.
    /// `--populate`) and an RTI (with `rti_args`, e.g. `--realtime-priority
    /// 10`). Returns the exit code the launcher exits
    /// with (`hprm_node::launch::exit_code`) and what went wrong, if anything.
    #[pyo3(signature = (argv, fast=false, timeout_s=None, store_memory="256m".to_string(), commands=std::collections::HashMap::new(), trace=None, store_args=Vec::new(), rti_args=Vec::new(), host=None))]
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &mut self,
        py: Python<'_>,
        argv: Vec<String>,
        fast: bool,
        timeout_s: Option<f64>,
        store_memory: String,
        commands: std::collections::HashMap<String, Vec<String>>,
        trace: Option<std::path::PathBuf>,
        store_args: Vec<String>,
        rti_args: Vec<String>,
        host: Option<String>,
    ) -> PyResult<(i32, Option<String>)> {
        if argv.is_empty() || commands.values().any(Vec::is_empty) {
            return Err(PyValueError::new_err("a federate command needs at least a program"));
        }
        let program = self.take_program()?;
        let launch = hprm_node::launch::Launch {
            fast,
            store_memory,
            timeout: timeout_s.map(Duration::from_secs_f64),
            federate_command: Some(Box::new(move |name: &str| {
                let cmd = commands.get(name).unwrap_or(&argv);
                let mut c = std::process::Command::new(&cmd[0]);
                c.args(&cmd[1..]);
                c
            })),
            handle_signals: true,
            trace,
            store_args,
            rti_args,
            host,
            ..hprm_node::launch::Launch::default()
        };
        let name = program.name().to_string();
        let report =
            py.allow_threads(move || launch.run(&program)).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok((report.exit_code(), report.failure_summary(&name)))
    }
}

/// What a reaction declared, for checking its effects and naming it.
struct Declared {
    /// `federate.reactor.reaction`.
    reaction: String,
    /// Every handle's Python name (see [`NativeProgram`]).
    names: Vec<String>,
    /// The handles the reaction may set or schedule.
    effects: Vec<usize>,
}

impl Declared {
    /// Refuses an effect the reaction did not declare, naming it as the
    /// Python class does and saying how to declare it.
    fn check_effect(&self, h: usize, what: &str) -> PyResult<()> {
        if self.effects.contains(&h) {
            return Ok(());
        }
        let name = self.names.get(h).map_or("?", String::as_str);
        Err(PyValueError::new_err(format!(
            "reaction {} {what} {name:?}, which it does not declare as an effect; add it to the reaction's effects: @hprm.reaction(..., effects=[..., {name:?}])",
            self.reaction
        )))
    }
}

/// Wraps a Python callable as a reaction body.
///
/// A Python exception is reported here, in Python's words: its traceback
/// once, headed by the federate and reaction, and the federate then fails
/// through `Ctx::fail` with the exception's line. A panic would print
/// Rust's panic message (and, with `RUST_BACKTRACE`, a Rust backtrace)
/// for what is a Python error.
fn invoker(
    f: PyObject,
    handles: Arc<Vec<Handle>>,
    declared: Arc<Declared>,
    policy: Policy,
) -> impl FnMut(&mut PyObject, &mut Ctx<'_>) + Send + 'static {
    move |instance: &mut PyObject, ctx: &mut Ctx<'_>| {
        let outcome = Python::with_gil(|py| -> Result<(), (String, String)> {
            let internal = |e: PyErr| describe(py, &e);
            let scope = if policy.store_arrays {
                let encoder = ctx.encoder();
                crate::store_memory::Scope::enter(py, encoder.store(), encoder.threshold())
                    .map_err(|e| (String::new(), e.to_string()))?
            } else {
                None
            };
            // SAFETY: the pointer is valid for this call only; `Context`
            // refuses every use once `invalidate` ran below.
            #[allow(clippy::unnecessary_cast)] // erases the lifetime
            let ptr = ctx as *mut Ctx<'_> as *mut Ctx<'static>;
            let c = Py::new(py, Context { ctx: ptr, handles: handles.clone(), declared: declared.clone() })
                .map_err(internal)?;
            let r = f.call1(py, (instance.clone_ref(py), c.clone_ref(py)));
            c.borrow_mut(py).ctx = std::ptr::null_mut();
            if let Some(scope) = scope {
                scope.exit(py).map_err(internal)?;
            }
            r.map(|_| ()).map_err(|e| describe(py, &e))
        });
        if let Err((traceback, line)) = outcome {
            let federate = ctx.federate().to_string();
            match policy.on_error {
                OnError::Stop => {
                    eprintln!("federate {federate}, reaction {} raised:\n{}", declared.reaction, traceback.trim_end());
                    ctx.fail(line);
                }
                OnError::Continue => eprintln!(
                    "federate {federate}, reaction {} raised; going on (on_error=\"continue\"):\n{}",
                    declared.reaction,
                    traceback.trim_end()
                ),
            }
        }
    }
}

/// A reaction's exception as (its Python traceback, its one line), as
/// `hprm._errors.describe` formats them.
fn describe(py: Python<'_>, e: &PyErr) -> (String, String) {
    let described = py
        .import("hprm._errors")
        .and_then(|m| m.getattr("describe"))
        .and_then(|d| d.call1((e.value(py),)))
        .and_then(|t| t.extract::<(String, String)>());
    described.unwrap_or_else(|_| {
        let tb = e.traceback(py).and_then(|t| t.format().ok()).unwrap_or_default();
        (format!("{tb}{e}"), e.to_string())
    })
}

/// What a Python reaction sees: valid only during the reaction's call.
#[pyclass(unsendable)]
pub struct Context {
    ctx: *mut Ctx<'static>,
    handles: Arc<Vec<Handle>>,
    declared: Arc<Declared>,
}

impl Context {
    fn ctx(&mut self) -> PyResult<&mut Ctx<'static>> {
        // SAFETY: non-null only while the reaction that created this
        // context runs, on this thread (the class is unsendable).
        unsafe { self.ctx.as_mut() }.ok_or_else(|| {
            PyRuntimeError::new_err(
                "this ctx belongs to a reaction that has returned; use ctx only inside the reaction",
            )
        })
    }

    fn handle(&self, h: usize) -> PyResult<Handle> {
        self.handles.get(h).copied().ok_or_else(|| PyValueError::new_err(format!("no port, timer or action {h}")))
    }
}

#[pymethods]
impl Context {
    /// The value of an input or action at this tag, or None.
    fn get(&mut self, py: Python<'_>, h: usize) -> PyResult<PyObject> {
        let handle = self.handle(h)?;
        let ctx = self.ctx()?;
        let v = match handle {
            Handle::Input(i) => ctx.get(i),
            Handle::Logical(a) => ctx.action_value(a),
            Handle::Physical(a) => ctx.physical_value(a),
            _ => None,
        };
        Ok(v.map_or_else(|| py.None(), |v| v.0.clone_ref(py)))
    }

    fn is_present(&mut self, h: usize) -> PyResult<bool> {
        let id = self.handle(h)?.id();
        Ok(self.ctx()?.is_present(id))
    }

    fn set(&mut self, h: usize, value: PyObject) -> PyResult<()> {
        let Handle::Output(o) = self.handle(h)? else { return Err(PyValueError::new_err("set takes an output")) };
        self.declared.check_effect(h, "sets output")?;
        self.ctx()?.set(o, PyVal(value));
        Ok(())
    }

    #[pyo3(signature = (h, value=None, delay_ns=0))]
    fn schedule(&mut self, py: Python<'_>, h: usize, value: Option<PyObject>, delay_ns: i64) -> PyResult<()> {
        let Handle::Logical(a) = self.handle(h)? else {
            return Err(PyValueError::new_err("schedule takes a logical action"));
        };
        self.declared.check_effect(h, "schedules action")?;
        self.ctx()?.schedule(a, ns(delay_ns), PyVal(value.unwrap_or_else(|| py.None())));
        Ok(())
    }

    /// A thread-safe scheduler for a physical action.
    fn physical_scheduler(&mut self, h: usize) -> PyResult<PhysicalScheduler> {
        let Handle::Physical(a) = self.handle(h)? else { return Err(PyValueError::new_err("not a physical action")) };
        Ok(PhysicalScheduler(self.ctx()?.physical_scheduler(a)))
    }

    fn request_stop(&mut self) -> PyResult<()> {
        self.ctx()?.request_stop();
        Ok(())
    }

    fn intended_tag(&mut self, py: Python<'_>, h: usize) -> PyResult<Option<Py<PyTuple>>> {
        let Handle::Input(i) = self.handle(h)? else { return Ok(None) };
        self.ctx()?
            .intended_tag(i)
            .map(|t| PyTuple::new(py, [t.time, i64::from(t.microstep)]).map(|t| t.unbind()))
            .transpose()
    }

    /// (time ns, microstep) of the current tag.
    fn tag(&mut self) -> PyResult<(i64, u32)> {
        let t = self.ctx()?.tag();
        Ok((t.time, t.microstep))
    }

    fn physical_time(&mut self) -> PyResult<i64> {
        Ok(self.ctx()?.physical_time())
    }

    fn start_time(&mut self) -> PyResult<i64> {
        Ok(self.ctx()?.start_time())
    }

    fn federate(&mut self) -> PyResult<String> {
        Ok(self.ctx()?.federate().to_string())
    }

    /// A writable buffer for an array of `dtype` and `shape`, allocated in the store for output `h`
    /// (with the output's fan-out as delivery count); `hprm.Context.alloc_array`
    /// makes the numpy array over it.
    fn loan(&mut self, h: usize, dtype: &str, shape: Vec<usize>) -> PyResult<crate::view::LoanView> {
        let Handle::Output(o) = self.handle(h)? else {
            return Err(PyValueError::new_err("alloc_array takes an output"));
        };
        let dtype = hprm_node::payload::Dtype::parse(dtype).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let loan = self.ctx()?.loan(o, dtype, &shape).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(crate::view::LoanView::new(loan))
    }
}

/// Schedules a physical action from any Python thread.
#[pyclass(frozen)]
pub struct PhysicalScheduler(hprm_node::PhysicalScheduler<PyVal>);

#[pymethods]
impl PhysicalScheduler {
    #[pyo3(signature = (value=None, delay_ns=0))]
    fn schedule(&self, py: Python<'_>, value: Option<PyObject>, delay_ns: i64) {
        self.0.schedule(PyVal(value.unwrap_or_else(|| py.None())), ns(delay_ns));
    }
}

/// Sends the runtime's logs (`tracing`) to stderr, filtered by RUST_LOG
/// (default: warnings and errors). Called by the first `Program.run` or
/// `Program.launch` (again, it does nothing).
#[pyfunction]
fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(hprm_node::log::ansi())
        .try_init();
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(init_logging, m)?)?;
    m.add_class::<NativeProgram>()?;
    m.add_class::<Context>()?;
    m.add_class::<PhysicalScheduler>()?;
    Ok(())
}
