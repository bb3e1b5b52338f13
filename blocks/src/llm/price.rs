//! The price table: USD per million tokens, in and out, per model.
//!
//! Built-in defaults cover common hosted models. A JSON file overrides and extends them:
//! the path in `AGENTLOOM_PRICES`, else `prices.json` in the per-user config directory
//! (e.g. `~/.config/agentloom/prices.json` on Linux). Its shape is
//! `{"model-name": {"input": 2.5, "output": 10.0}, …}`. A block's `price_in` / `price_out`
//! config overrides both. A model is found by exact name, else by the longest listed name
//! it starts with (so `gpt-4o-2024-08-06` is priced as `gpt-4o`), ignoring a `vendor/`
//! prefix. The file is read on each use, so edits apply to the next run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The environment variable that points at a price file.
pub const PRICES_ENV_VAR: &str = "AGENTLOOM_PRICES";

/// USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

impl Price {
    /// The cost of `input` and `output` tokens.
    #[allow(
        clippy::cast_precision_loss,
        reason = "token counts are far below 2^52"
    )]
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input + output as f64 * self.output) / 1_000_000.0
    }
}

/// A price file that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the price table {path} could not be used: {message}; fix or remove the file")]
pub struct PriceError {
    pub path: String,
    pub message: String,
}

/// Model name → price.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

const BUILTIN: &[(&str, f64, f64)] = &[
    // OpenAI
    ("gpt-5", 1.25, 10.0),
    ("gpt-5-mini", 0.25, 2.0),
    ("gpt-5-nano", 0.05, 0.40),
    ("gpt-4.1", 2.0, 8.0),
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1-nano", 0.10, 0.40),
    ("gpt-4o", 2.50, 10.0),
    ("gpt-4o-mini", 0.15, 0.60),
    ("gpt-4-turbo", 10.0, 30.0),
    ("gpt-3.5-turbo", 0.50, 1.50),
    ("o1", 15.0, 60.0),
    ("o3", 2.0, 8.0),
    ("o3-mini", 1.10, 4.40),
    ("o4-mini", 1.10, 4.40),
    // Anthropic
    ("claude-opus-4-5", 5.0, 25.0),
    ("claude-opus-4-1", 15.0, 75.0),
    ("claude-opus-4", 15.0, 75.0),
    ("claude-sonnet-4-5", 3.0, 15.0),
    ("claude-sonnet-4", 3.0, 15.0),
    ("claude-haiku-4-5", 1.0, 5.0),
    ("claude-3-7-sonnet", 3.0, 15.0),
    ("claude-3-5-sonnet", 3.0, 15.0),
    ("claude-3-5-haiku", 0.80, 4.0),
    ("claude-3-haiku", 0.25, 1.25),
    ("claude-3-opus", 15.0, 75.0),
];

impl PriceTable {
    /// The built-in defaults.
    pub fn builtin() -> PriceTable {
        PriceTable {
            prices: BUILTIN
                .iter()
                .map(|&(model, input, output)| (model.to_owned(), Price { input, output }))
                .collect(),
        }
    }

    /// The built-in defaults overridden by the user's price file, if there is one.
    pub fn load() -> Result<PriceTable, PriceError> {
        let mut table = PriceTable::builtin();
        if let Some(path) = price_file_path()
            && path.exists()
        {
            table.merge_file(&path)?;
        }
        Ok(table)
    }

    /// Adds (or replaces) the prices in the JSON file at `path`.
    pub fn merge_file(&mut self, path: &Path) -> Result<(), PriceError> {
        let fail = |message: String| PriceError {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let parsed: BTreeMap<String, Price> = serde_json::from_str(&text).map_err(|e| {
            fail(format!(
                "{e} (expected {{\"model\": {{\"input\": USD per million tokens, \"output\": …}}}})"
            ))
        })?;
        for (model, price) in parsed {
            if !(price.input.is_finite() && price.output.is_finite())
                || price.input < 0.0
                || price.output < 0.0
            {
                return Err(fail(format!("the price of `{model}` must be zero or more")));
            }
            self.prices.insert(model, price);
        }
        Ok(())
    }

    /// Sets the price of `model`.
    pub fn set(&mut self, model: &str, price: Price) {
        self.prices.insert(model.to_owned(), price);
    }

    /// Every listed model and its price, sorted by model.
    pub fn entries(&self) -> impl Iterator<Item = (&str, Price)> {
        self.prices
            .iter()
            .map(|(model, price)| (model.as_str(), *price))
    }

    /// The price of `model`: exact name, else the longest listed prefix ending at a `-`,
    /// `:`, `@` or `.` boundary; a `vendor/` prefix is ignored.
    pub fn lookup(&self, model: &str) -> Option<Price> {
        let model = model.trim();
        if let Some(price) = self.prices.get(model) {
            return Some(*price);
        }
        let bare = model.rsplit('/').next().unwrap_or(model);
        if let Some(price) = self.prices.get(bare) {
            return Some(*price);
        }
        self.prices
            .iter()
            .filter(|(name, _)| {
                bare.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with(['-', ':', '@', '.']))
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, price)| *price)
    }
}

/// Where the user's price file is looked for: `AGENTLOOM_PRICES`, else `prices.json` in
/// the per-user config directory (`~/.config/agentloom` on Linux; on macOS and Windows the
/// same folders as the run log's, see [`agentloom_core::UserDirs`]).
pub fn price_file_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(PRICES_ENV_VAR).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    agentloom_core::UserDirs::of_this_user().map(|dirs| dirs.config().join("prices.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_exact_name_dated_variant_and_vendor_prefix() {
        let table = PriceTable::builtin();
        assert_eq!(table.lookup("gpt-4o").unwrap().input, 2.5);
        assert_eq!(table.lookup("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(table.lookup("gpt-4o-2024-08-06").unwrap().output, 10.0);
        assert_eq!(table.lookup("openai/gpt-4.1-mini").unwrap().output, 1.6);
        assert_eq!(
            table.lookup("claude-sonnet-4-5-20250929").unwrap().input,
            3.0
        );
        assert_eq!(
            table.lookup("claude-opus-4-1-20250805").unwrap().output,
            75.0
        );
        // A prefix must end at a separator: `o3x` is not `o3`.
        assert_eq!(table.lookup("o3x"), None);
        assert_eq!(table.lookup("llama3.2:latest"), None);
    }

    #[test]
    fn cost_is_per_million_tokens() {
        let price = Price {
            input: 2.0,
            output: 8.0,
        };
        assert!((price.cost(1_000_000, 500_000) - 6.0).abs() < 1e-12);
        assert!((price.cost(10, 20) - 0.000_18).abs() < 1e-12);
    }

    #[test]
    fn a_file_overrides_and_extends_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prices.json");
        std::fs::write(
            &path,
            r#"{"gpt-4o": {"input": 1, "output": 2}, "my-model": {"input": 0.5, "output": 0.5}}"#,
        )
        .unwrap();
        let mut table = PriceTable::builtin();
        table.merge_file(&path).unwrap();
        assert_eq!(
            table.lookup("gpt-4o"),
            Some(Price {
                input: 1.0,
                output: 2.0
            })
        );
        assert_eq!(table.lookup("my-model:7b").map(|p| p.input), Some(0.5));
        assert_eq!(table.lookup("gpt-4o-mini").map(|p| p.input), Some(0.15));

        std::fs::write(&path, r#"{"gpt-4o": {"input": "cheap"}}"#).unwrap();
        let err = table.merge_file(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "the price table {} could not be used:",
                path.display()
            )),
            "{err}"
        );
        assert!(err.ends_with("fix or remove the file"), "{err}");
        std::fs::write(&path, r#"{"x": {"input": -1, "output": 0}}"#).unwrap();
        assert!(
            table
                .merge_file(&path)
                .unwrap_err()
                .to_string()
                .contains("`x` must be zero or more")
        );
    }
}
