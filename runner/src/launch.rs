//! The one way a run starts. A door (the CLI, the app, `serve`, `mcp`, an evaluation, a
//! worker) reads its graph as a [`GraphSource`], decides its [`Trust`] once, and hands both
//! to [`Prepared::new`]: the catalog, the secret source, safe mode and the reach trust gives
//! are decided here and nowhere else. [`Prepared::launch`] then runs it with the door's
//! inputs, workspace, event sinks and approver, recorded in the run log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{
    BlockCatalog as _, GraphDoc, Problem, SecretSource, ValidGraph, ValueMap, validate_shared,
};
use agentloom_engine::{
    Approver, EventSink, Executor, FanoutSink, LogPolicy, Replay, RunOptions, RunReport, RunStore,
};

use crate::format_problem;
use crate::record::{RunContext, RunRecording};
use crate::source::GraphSource;
use crate::trust;

/// What a run of a graph may do beyond its own nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Its user trusts it: its credentials, its MCP servers, graph files anywhere, the
    /// private network where a node asks for it, its own safe-mode setting.
    Trusted,
    /// Not trusted (`file`: the graph file, to say how to trust it): no credential, no MCP
    /// server started or reached, no graph file called outside its folder, no private or
    /// loopback address reached through a URL the file chose, no unsandboxed code, and
    /// every side effect asks first.
    Untrusted { file: Option<PathBuf> },
}

impl Trust {
    /// `Trusted` when `trusted`, else untrusted naming `file`.
    pub fn of(trusted: bool, file: Option<&Path>) -> Trust {
        if trusted {
            Trust::Trusted
        } else {
            Trust::Untrusted {
                file: file.map(Path::to_path_buf),
            }
        }
    }

    pub fn is_trusted(&self) -> bool {
        matches!(self, Trust::Trusted)
    }

    /// The file named when untrusted.
    pub fn untrusted_file(&self) -> Option<&Path> {
        match self {
            Trust::Trusted => None,
            Trust::Untrusted { file } => file.as_deref(),
        }
    }
}

/// Where a trusted run's credentials come from.
#[derive(Clone, Default)]
pub enum Credentials {
    /// `AGENTLOOM_SECRET_<NAME>`, then the OS keychain.
    #[default]
    Default,
    /// A source of the door's own (the app's credential store, a test's).
    Given(Arc<dyn SecretSource>),
}

impl Credentials {
    /// The keychain credentials indexed by `store` (the app's own), else the environment's
    /// (`AGENTLOOM_SECRET_<NAME>`).
    pub fn of_store(store: Option<Arc<agentloom_engine::CredentialStore>>) -> Credentials {
        let secrets: Arc<dyn SecretSource> = match store {
            Some(store) => Arc::new(agentloom_engine::KeychainSecrets::new(store)),
            None => Arc::new(agentloom_engine::EnvSecrets),
        };
        Credentials::Given(secrets)
    }
}

/// The credentials a run with `trust` gets: none at all when untrusted.
pub fn secrets_for(trust: &Trust, credentials: &Credentials) -> Arc<dyn SecretSource> {
    match (trust, credentials) {
        (Trust::Untrusted { file }, _) => Arc::new(trust::UntrustedSecrets::new(file.as_deref())),
        (Trust::Trusted, Credentials::Given(secrets)) => secrets.clone(),
        (Trust::Trusted, Credentials::Default) => crate::default_secrets(),
    }
}

/// The document as it runs with `trust`: an untrusted graph always runs in safe mode. (Its
/// nodes' own `allow_private_network` counts for nothing through the executor's
/// private-network policy, the one place that decides reach.)
pub fn runnable_doc(mut doc: GraphDoc, trust: &Trust) -> GraphDoc {
    if !trust.is_trusted() {
        doc.settings.safe_mode = true;
    }
    doc
}

/// The block catalog `source` is checked and run against with `trust`: the built-in
/// blocks, `graph.call` reading only the files read with the source (inside its folder
/// when untrusted), and, trusted, the tools of its MCP servers (connected now; with
/// `replay`, listed from the recording when it holds them). Untrusted, no server is
/// started or reached: each is a problem, as is an agent that would run code unsandboxed.
pub fn catalog_for(
    source: &GraphSource,
    trust: &Trust,
    secrets: &dyn SecretSource,
    replay: Option<&Replay>,
) -> (Registry, Vec<Problem>) {
    let mut registry = Registry::builtin();
    let file = source.path();
    let why = (!trust.is_trusted()).then(|| match file {
        Some(file) => trust::not_trusted(file),
        None => "this graph is not trusted".to_owned(),
    });
    // A copy that came with its files (a queued request, a recorded run) is confined by
    // them: nothing else can be called.
    let why = why.filter(|_| source.is_on_disk());
    registry.for_graph_snapshot(file, source.files().clone(), why);
    let problems = if trust.is_trusted() {
        agentloom_blocks::mcp::add_mcp_tools_recorded(
            &mut registry,
            source.doc(),
            secrets,
            &|list| replay?.catalog_answer(&list.source, &list.call()),
        )
    } else {
        untrusted_problems(source.doc(), file)
    };
    (registry, problems)
}

/// What an untrusted graph may not have: its MCP servers (never connected) and agents
/// running code without a sandbox, one problem each.
pub fn untrusted_problems(doc: &GraphDoc, file: Option<&Path>) -> Vec<Problem> {
    let label = file.unwrap_or(Path::new("this graph"));
    let mut problems = trust::offline_server_problems(doc, label);
    problems.extend(trust::unsandboxed_code_problems(doc, label));
    problems
}

/// What stops an untrusted graph from running offline: a server one of its nodes needs
/// (a server nothing uses is simply not started), and unsandboxed code.
fn untrusted_run_problems(problems: Vec<Problem>, doc: &GraphDoc) -> Vec<Problem> {
    problems
        .into_iter()
        .filter(|problem| {
            let Some(server) = problem.path.strip_prefix("$.mcp_servers.") else {
                return true;
            };
            let prefix = agentloom_blocks::mcp::tool_kind(server, "");
            doc.nodes.iter().any(|node| node.block.starts_with(&prefix))
        })
        .collect()
}

/// Every problem of `source` as `trust` lets it run: servers not connected, then what
/// validation finds (an untrusted file's tool nodes of servers not connected are covered
/// by their server's problem). Returns the catalog too (`agentloom blocks --graph`).
pub fn check(source: &GraphSource, trust: &Trust) -> (Registry, Vec<Problem>) {
    let secrets = secrets_for(trust, &Credentials::Default);
    let doc = runnable_doc(source.doc().clone(), trust);
    let (registry, mut problems) = catalog_for(source, trust, secrets.as_ref(), None);
    if let Err(mut more) = agentloom_core::validate(&doc, &registry) {
        if !trust.is_trusted() {
            trust::drop_offline_tool_nodes(&mut more, &doc);
        }
        problems.extend(more);
    }
    (registry, problems)
}

/// A graph made ready to run: checked against its catalog, with the executor its trust
/// allows. Clones share everything.
#[derive(Clone)]
pub struct Prepared {
    catalog: Arc<Registry>,
    graph: Arc<ValidGraph>,
    trust: Trust,
    executor: Executor,
    /// Whose memory the runs use: see [`graph_identity`].
    identity: String,
}

/// The graph's identity in the run log's memory: its file (made absolute), or its name
/// when it has no file, so two files of the same name keep apart and a graph keeps its
/// memory whichever door runs it.
pub fn graph_identity(graph_file: Option<&Path>, name: &str) -> String {
    match graph_file {
        Some(file) => {
            let absolute = std::fs::canonicalize(file)
                .or_else(|_| std::path::absolute(file))
                .unwrap_or_else(|_| file.to_path_buf());
            format!("file:{}", absolute.display())
        }
        None => format!("name:{name}"),
    }
}

impl Prepared {
    /// Builds the catalog of `source` as `trust` allows (connecting a trusted graph's MCP
    /// servers) and validates it. The error lists every problem, each naming the file.
    pub fn new(
        source: GraphSource,
        trust: Trust,
        credentials: &Credentials,
        replay: Option<&Replay>,
    ) -> Result<Prepared, Vec<String>> {
        let secrets = secrets_for(&trust, credentials);
        let (registry, problems) = catalog_for(&source, &trust, secrets.as_ref(), replay);
        let label = source
            .path()
            .map_or_else(|| PathBuf::from("graph"), Path::to_path_buf);
        let label = label.as_path();
        // The document read is the one that runs: moved, not copied (a large graph's copy
        // would cost its size again).
        let doc = Arc::new(runnable_doc(source.into_doc(), &trust));
        let problems = if trust.is_trusted() {
            problems
        } else {
            untrusted_run_problems(problems, &doc)
        };
        let mut problems: Vec<String> = problems.iter().map(|p| format_problem(label, p)).collect();
        match validate_shared(doc.clone(), &registry) {
            Ok(graph) if problems.is_empty() => {
                Ok(Self::ready(Arc::new(registry), graph, trust, secrets))
            }
            Ok(_) => Err(problems),
            Err(mut more) => {
                if !trust.is_trusted() {
                    trust::drop_offline_tool_nodes(&mut more, &doc);
                }
                problems.extend(more.iter().map(|p| format_problem(label, p)));
                Err(problems)
            }
        }
    }

    /// `doc` checked against `catalog`, a catalog [`catalog_for`] built for it (the app
    /// keeps one while the graph is edited, its MCP servers connected once). The error is
    /// every problem.
    pub fn with_catalog(
        catalog: Arc<Registry>,
        doc: GraphDoc,
        trust: Trust,
        credentials: &Credentials,
    ) -> Result<Prepared, Vec<Problem>> {
        let doc = Arc::new(runnable_doc(doc, &trust));
        let mut problems = if trust.is_trusted() {
            Vec::new()
        } else {
            untrusted_run_problems(untrusted_problems(&doc, trust.untrusted_file()), &doc)
        };
        match validate_shared(doc, catalog.as_ref()) {
            Ok(graph) if problems.is_empty() => {
                let secrets = secrets_for(&trust, credentials);
                Ok(Self::ready(catalog, graph, trust, secrets))
            }
            Ok(_) => Err(problems),
            Err(more) => {
                problems.extend(more);
                Err(problems)
            }
        }
    }

    fn ready(
        catalog: Arc<Registry>,
        graph: ValidGraph,
        trust: Trust,
        secrets: Arc<dyn SecretSource>,
    ) -> Prepared {
        // The one executor of every door: what it may reach follows the trust decided above.
        let executor = Executor::new(catalog.clone())
            .with_secrets(secrets)
            .with_private_network(trust.is_trusted());
        let identity = graph_identity(catalog.config_ctx().graph_file, &graph.doc.name);
        Prepared {
            catalog,
            graph: Arc::new(graph),
            trust,
            executor,
            identity,
        }
    }

    pub fn graph(&self) -> &Arc<ValidGraph> {
        &self.graph
    }

    pub fn catalog(&self) -> &Arc<Registry> {
        &self.catalog
    }

    pub fn trust(&self) -> &Trust {
        &self.trust
    }

    /// The text of every graph file the graph calls, as validated (sent with queued runs).
    pub fn called_files(&self) -> Vec<(String, String)> {
        self.catalog
            .graph_files()
            .map(|files| files.contents())
            .unwrap_or_default()
    }

    /// Why side effects will need approval, when the graph is a file that is not trusted.
    pub fn safe_mode_note(&self) -> Option<String> {
        let file = self.trust.untrusted_file()?;
        trust::safe_mode_note(file, &self.graph)
    }

    /// Runs the graph once as `launch` says, recorded in the run log when it names one. A
    /// run log that cannot be written is said in [`Launched::log_error`]: the run is worth
    /// more than its entry.
    pub async fn launch(&self, launch: Launch) -> Launched {
        let Launch {
            inputs,
            workspace,
            options,
            log,
            mut sinks,
            ask,
        } = launch;
        let (folder, made_on_use, record_at_start) = match &workspace {
            Workspace::Folder(folder) | Workspace::Shared(folder) => (folder.clone(), false, false),
            Workspace::FolderRecordedAtStart(folder) => (folder.clone(), false, true),
            Workspace::MadeOnUse(folder) => (folder.clone(), true, false),
        };
        let context = RunContext {
            workspace: record_at_start.then(|| folder.clone()),
            graph_files: self.catalog.graph_files().cloned(),
            untrusted_file: self.trust.untrusted_file().map(Path::to_path_buf),
            resumes: options.run_id.clone(),
        };
        let mut log_error = None;
        // Opening a connection and starting the writer touch the disk: off the async
        // workers, which go on with other runs meanwhile.
        let recording = match log {
            Some(Log { store, policy }) => {
                let doc = self.graph.doc.clone();
                let started = tokio::task::spawn_blocking(move || {
                    RunRecording::start(&store, &doc, policy, context)
                })
                .await
                .map_err(|err| err.to_string())
                .and_then(|started| started.map_err(|err| err.to_string()));
                match started {
                    Ok(recording) => Some(recording),
                    Err(err) => {
                        log_error = Some(format!("this run will not be logged: {err}"));
                        None
                    }
                }
            }
            None => None,
        };
        let store = recording.as_ref().map(|r| r.store().clone());
        let mut options = options;
        let debugged = options.debug.is_some();
        crate::debug::make_durable(&mut options, store.as_ref());
        if let Some(recording) = &recording {
            sinks.extend(recording.sinks());
        }
        // What runs is what was validated, whatever happens to the files meanwhile.
        if let Some(files) = self.catalog.graph_files() {
            files.freeze();
        }
        let mut executor = if made_on_use {
            self.executor
                .clone()
                .with_workspace_made_on_use(folder.clone())
        } else {
            self.executor.clone().with_workspace(folder.clone())
        };
        if let Some(store) = &store {
            executor = executor.with_memory(store.graph_memory(&self.identity));
        }
        if let Some(approver) = crate::approver(store.as_ref(), ask) {
            executor = executor.with_approver(approver);
        }
        let report = executor
            .run(
                self.graph.clone(),
                inputs,
                options,
                Arc::new(FanoutSink(sinks)),
            )
            .await;
        crate::debug::finish(debugged, store.as_ref(), &report.run_id);
        if let Some(recording) = recording {
            let run_id = report.run_id.clone();
            let at_end = matches!(workspace, Workspace::Folder(_)).then_some(folder);
            let finished =
                tokio::task::spawn_blocking(move || recording.finish(&run_id, at_end.as_deref()))
                    .await;
            match finished {
                Ok(Ok(())) => {}
                Ok(Err(err)) => log_error = Some(err.to_string()),
                Err(err) => log_error = Some(err.to_string()),
            }
        }
        Launched { report, log_error }
    }
}

/// Where a run's file blocks are confined.
#[derive(Clone, Debug)]
pub enum Workspace {
    /// An existing folder, kept with the run when it ends.
    Folder(PathBuf),
    /// An existing folder, kept with the run as it starts (a run killed while it waits
    /// still resumes there: the app's runs).
    FolderRecordedAtStart(PathBuf),
    /// An existing folder every run of a door shares (a server's, an evaluation's): not
    /// kept with each run.
    Shared(PathBuf),
    /// A folder made (with its parents) only when a block first uses it: a server's task
    /// folders, most of which no run writes into.
    MadeOnUse(PathBuf),
}

/// The run log a run is recorded in, and how much of its values it keeps.
pub struct Log {
    pub store: Arc<RunStore>,
    pub policy: LogPolicy,
}

impl Log {
    pub fn new(store: Arc<RunStore>) -> Log {
        Log {
            store,
            policy: LogPolicy::default(),
        }
    }
}

/// One run of a [`Prepared`] graph, as a door asks for it.
pub struct Launch {
    pub inputs: ValueMap,
    pub workspace: Workspace,
    /// Cancel, pause, concurrency, the run id and seed of a resumed run, a replay.
    pub options: RunOptions,
    /// `None`: not recorded.
    pub log: Option<Log>,
    /// The door's own consumers of the run's events (progress, a live view, a publisher).
    pub sinks: Vec<Arc<dyn EventSink>>,
    /// Who is asked about approvals; with a run log every request is stored first, and the
    /// run pauses when there is nobody to ask.
    pub ask: Option<Arc<dyn Approver>>,
}

impl Launch {
    /// A run with `inputs` in `workspace`, with default options, unrecorded, nobody asked.
    pub fn new(inputs: ValueMap, workspace: Workspace) -> Launch {
        Launch {
            inputs,
            workspace,
            options: RunOptions::default(),
            log: None,
            sinks: Vec::new(),
            ask: None,
        }
    }
}

/// How a launched run ended.
pub struct Launched {
    pub report: RunReport,
    /// The run log could not be written (or not completely); the run itself is done.
    pub log_error: Option<String>,
}
