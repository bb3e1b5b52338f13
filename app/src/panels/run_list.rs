//! The runs the history panel lists: the rows read from the run log, for which graph, and
//! when (listed again while a run is live).

use std::time::Instant;

use agentloom_engine::RunRow;

/// The listed runs.
#[derive(Default)]
pub(crate) struct RunList {
    /// The runs, newest first.
    pub(crate) rows: Vec<RunRow>,
    /// Every graph's runs are listed, not only the shown graph's.
    pub(crate) all_graphs: bool,
    /// The graph the runs were listed for (`None`: all).
    pub(crate) of: Option<String>,
    /// When they were listed, while a run is live.
    pub(crate) listed_at: Option<Instant>,
}
