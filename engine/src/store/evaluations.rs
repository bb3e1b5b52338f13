//! Evaluations in the run log: one row each (its summary kept whole, as `agentloom eval
//! --json` printed it) and the runs of its cases, which are ordinary recorded runs.

use rusqlite::{OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::{RunStore, StoreError, from_i64, to_i64};

/// One evaluation as listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvaluationRow {
    pub id: String,
    pub graph_name: String,
    /// The graph file, as given (absolute).
    pub graph_file: String,
    pub cases_file: String,
    /// Unix milliseconds.
    pub started_at_ms: u64,
    pub duration_ms: Option<u64>,
    /// Cases that passed and failed (all their runs).
    pub passed: u64,
    pub failed: u64,
    /// Over runs; `None` while it goes.
    pub pass_rate: Option<f64>,
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One run of a case of an evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvaluationRun {
    pub case_name: String,
    /// 0 for the first run of the case (`--repeat`).
    pub repeat: u32,
    pub run_id: String,
    pub passed: bool,
    /// The check results, as JSON.
    pub checks: serde_json::Value,
}

/// One evaluation with its summary (`None` until it finished) and its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct EvaluationDetail {
    pub row: EvaluationRow,
    pub summary: Option<serde_json::Value>,
    pub runs: Vec<EvaluationRun>,
}

impl RunStore {
    fn evaluation_write_error(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        |source| StoreError::Write {
            path: self.path.clone(),
            source,
        }
    }

    fn evaluation_read_error(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        |source| StoreError::Read {
            path: self.path.clone(),
            source,
        }
    }

    /// Records that evaluation `row.id` started.
    pub fn begin_evaluation(&self, row: &EvaluationRow) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT INTO evaluations (id, graph_name, graph_file, cases_file, started_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    row.id,
                    row.graph_name,
                    row.graph_file,
                    row.cases_file,
                    to_i64(row.started_at_ms)
                ],
            )
            .map_err(self.evaluation_write_error())?;
        Ok(())
    }

    /// Links run `run.run_id` to evaluation `evaluation_id` as a run of a case.
    pub fn record_evaluation_run(
        &self,
        evaluation_id: &str,
        run: &EvaluationRun,
    ) -> Result<(), StoreError> {
        // Once per case of an evaluation: prepared once.
        self.lock()
            .prepare_cached(
                "INSERT OR REPLACE INTO evaluation_runs
                    (evaluation_id, case_name, repeat, run_id, passed, checks_json)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut insert| {
                insert.execute(params![
                    evaluation_id,
                    run.case_name,
                    run.repeat,
                    run.run_id,
                    run.passed,
                    run.checks.to_string()
                ])
            })
            .map_err(self.evaluation_write_error())?;
        Ok(())
    }

    /// Records the totals of a finished evaluation and its whole summary.
    pub fn finish_evaluation(
        &self,
        row: &EvaluationRow,
        summary: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "UPDATE evaluations SET duration_ms = ?2, passed = ?3, failed = ?4, pass_rate = ?5,
                        input_tokens = ?6, output_tokens = ?7, cost_usd = ?8, summary_json = ?9
                 WHERE id = ?1",
                params![
                    row.id,
                    row.duration_ms.map(to_i64),
                    to_i64(row.passed),
                    to_i64(row.failed),
                    row.pass_rate,
                    to_i64(row.input_tokens),
                    to_i64(row.output_tokens),
                    row.cost_usd,
                    summary.to_string()
                ],
            )
            .map_err(self.evaluation_write_error())?;
        Ok(())
    }

    /// The latest evaluations, newest first; of one graph file when `graph_file` is given.
    pub fn list_evaluations(
        &self,
        graph_file: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EvaluationRow>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, graph_name, graph_file, cases_file, started_at_ms, duration_ms, passed,
                        failed, pass_rate, cost_usd, input_tokens, output_tokens
                 FROM evaluations WHERE ?1 IS NULL OR graph_file = ?1
                 ORDER BY started_at_ms DESC, id DESC LIMIT ?2",
            )
            .map_err(self.evaluation_read_error())?;
        let rows = stmt
            .query_map(
                params![graph_file, i64::try_from(limit).unwrap_or(i64::MAX)],
                evaluation_row,
            )
            .and_then(Iterator::collect)
            .map_err(self.evaluation_read_error())?;
        Ok(rows)
    }

    /// Evaluation `id_or_prefix` (a unique prefix is enough), its summary and its runs.
    pub fn evaluation(&self, id_or_prefix: &str) -> Result<Option<EvaluationDetail>, StoreError> {
        let conn = self.lock();
        let pattern = format!("{}%", id_or_prefix.replace(['%', '_'], ""));
        let ids: Vec<String> = conn
            .prepare_cached("SELECT id FROM evaluations WHERE id LIKE ?1 LIMIT 2")
            .and_then(|mut stmt| {
                stmt.query_map(params![pattern], |row| row.get(0))?
                    .collect()
            })
            .map_err(self.evaluation_read_error())?;
        let [id] = ids.as_slice() else {
            return Ok(None);
        };
        let found = conn
            .query_row(
                "SELECT id, graph_name, graph_file, cases_file, started_at_ms, duration_ms, passed,
                        failed, pass_rate, cost_usd, input_tokens, output_tokens, summary_json
                 FROM evaluations WHERE id = ?1",
                params![id],
                |row| Ok((evaluation_row(row)?, row.get::<_, Option<String>>(12)?)),
            )
            .optional()
            .map_err(self.evaluation_read_error())?;
        let Some((row, summary)) = found else {
            return Ok(None);
        };
        let runs = conn
            .prepare_cached(
                "SELECT case_name, repeat, run_id, passed, checks_json FROM evaluation_runs
                 WHERE evaluation_id = ?1 ORDER BY rowid",
            )
            .and_then(|mut stmt| {
                stmt.query_map(params![id], |row| {
                    let checks: String = row.get(4)?;
                    Ok(EvaluationRun {
                        case_name: row.get(0)?,
                        repeat: row.get(1)?,
                        run_id: row.get(2)?,
                        passed: row.get(3)?,
                        checks: serde_json::from_str(&checks).unwrap_or_default(),
                    })
                })?
                .collect()
            })
            .map_err(self.evaluation_read_error())?;
        let summary = summary.and_then(|text| serde_json::from_str(&text).ok());
        Ok(Some(EvaluationDetail { row, summary, runs }))
    }
}

fn evaluation_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<EvaluationRow> {
    Ok(EvaluationRow {
        id: row.get(0)?,
        graph_name: row.get(1)?,
        graph_file: row.get(2)?,
        cases_file: row.get(3)?,
        started_at_ms: from_i64(row.get(4)?),
        duration_ms: row.get::<_, Option<i64>>(5)?.map(from_i64),
        passed: from_i64(row.get(6)?),
        failed: from_i64(row.get(7)?),
        pass_rate: row.get(8)?,
        cost_usd: row.get(9)?,
        input_tokens: from_i64(row.get(10)?),
        output_tokens: from_i64(row.get(11)?),
    })
}
