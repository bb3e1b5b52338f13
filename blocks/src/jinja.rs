//! The minijinja set-up every template shares. Environments are built once per process, so
//! a template node keeps only its source and variable names (an environment of its own
//! costs ~19 KiB). Renders are bounded: a fuel budget stops runaway loops, an output cap
//! stops runaway text, and cancellation is checked as output is written.
//!
//! A render first runs inline with a small budget, which is enough for almost every
//! template; one that needs more is rendered again on the run's blocking pool (see
//! [`RunCtx::run_cpu`]) so it never stalls the scheduler and a timeout or Ctrl-C holds.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use agentloom_core::{BlockError, CancellationToken, RunCtx, run_cpu_bound};
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior};
use serde::Serialize;

/// Instructions an inline render may execute before it moves to the blocking pool.
const INLINE_FUEL: u64 = 20_000;
/// Instructions any render may execute (a few seconds of work at most).
const MAX_FUEL: u64 = 50_000_000;
/// The most text one render may produce.
pub(crate) const MAX_OUTPUT_BYTES: usize = 16 << 20;

fn environment(fuel: u64) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_keep_trailing_newline(true);
    // Missing attributes fail the render, but `{% if user.nickname %}` still works.
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    // A template's output is text, never escaped: compiled templates are named by their
    // source, and minijinja would choose HTML escaping for a source ending in ".html".
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_fuel(Some(fuel));
    env
}

fn inline_env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| environment(INLINE_FUEL))
}

fn pool_env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| environment(MAX_FUEL))
}

/// Source text kept compiled at most; then the compiled templates are all dropped at once.
const MAX_COMPILED_BYTES: usize = 4 << 20;

/// Templates kept compiled at most, however short: a compiled template holds several KiB
/// whatever its source, so a process meeting many distinct templates (a server, a large
/// graph) would otherwise keep hundreds of MiB within the source budget.
const MAX_COMPILED_TEMPLATES: usize = 512;

/// What each compiled template counts against [`MAX_COMPILED_BYTES`] besides its source.
const COMPILED_TEMPLATE_WEIGHT: usize = MAX_COMPILED_BYTES / MAX_COMPILED_TEMPLATES;

/// Source bytes compiled into the current [`compiled_env`], each template weighing
/// [`COMPILED_TEMPLATE_WEIGHT`] more.
static COMPILED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// What names a compiled template: a number drawn per process, then the template's source.
/// No template can name one (`{% include %}` finds nothing, as in a template on its own).
fn compiled_name_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        use std::hash::{BuildHasher as _, Hasher as _};
        let drawn = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        format!("\u{0}compiled-template-{drawn:016x}\u{0}")
    })
}

/// The inline environment, keeping every template it rendered compiled: compiling a
/// template costs more than rendering a short one, and a node renders at every run.
fn compiled_env() -> Arc<Environment<'static>> {
    static ENV: OnceLock<RwLock<Arc<Environment<'static>>>> = OnceLock::new();
    let slot = ENV.get_or_init(|| RwLock::new(Arc::new(compiling_environment())));
    if COMPILED_BYTES.load(Ordering::Relaxed) > MAX_COMPILED_BYTES {
        let mut env = slot.write().unwrap_or_else(PoisonError::into_inner);
        if COMPILED_BYTES.swap(0, Ordering::Relaxed) > MAX_COMPILED_BYTES {
            *env = Arc::new(compiling_environment());
        }
    }
    Arc::clone(&slot.read().unwrap_or_else(PoisonError::into_inner))
}

fn compiling_environment() -> Environment<'static> {
    let mut env = environment(INLINE_FUEL);
    env.set_loader(|name| {
        Ok(name.strip_prefix(compiled_name_prefix()).map(|source| {
            COMPILED_BYTES.fetch_add(source.len() + COMPILED_TEMPLATE_WEIGHT, Ordering::Relaxed);
            source.to_owned()
        }))
    });
    env
}

/// Sources parsed before, with their variables or why they do not parse.
#[derive(Default)]
struct ParsedTemplates {
    by_source: HashMap<Arc<str>, Result<Arc<[String]>, String>>,
    /// The length of every source remembered.
    bytes: usize,
}

/// The source text remembered at most (then all forgotten at once), and the longest
/// source remembered.
const MAX_REMEMBERED_BYTES: usize = 4 << 20;
const MAX_REMEMBERED_SOURCE: usize = 64 << 10;

fn parsed_templates() -> std::sync::MutexGuard<'static, ParsedTemplates> {
    static PARSED: OnceLock<Mutex<ParsedTemplates>> = OnceLock::new();
    PARSED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A parsed template: its source and the variables it reads.
pub(crate) struct SharedTemplate {
    source: Arc<str>,
    variables: Vec<String>,
}

impl SharedTemplate {
    /// Checks `source` and finds its variables (sorted, without the environment's globals).
    /// The error says what is wrong and on which line.
    pub(crate) fn parse(source: &str) -> Result<Self, String> {
        // A graph is validated again at every edit in the app and at every load elsewhere,
        // and a template reused across nodes is checked once: the answer depends only on
        // the source, and nodes with the same source share it.
        if let Some((source, variables)) = parsed_templates().by_source.get_key_value(source) {
            return variables.clone().map(|variables| Self {
                source: Arc::clone(source),
                variables: variables.to_vec(),
            });
        }
        let env = inline_env();
        let variables = match env.template_from_str(source) {
            Ok(template) => {
                let globals: BTreeSet<&str> = env.globals().map(|(name, _)| name).collect();
                let variables: BTreeSet<String> = template
                    .undeclared_variables(false)
                    .into_iter()
                    .filter(|name| !globals.contains(name.as_str()))
                    .collect();
                Ok(variables.into_iter().collect::<Arc<[String]>>())
            }
            Err(err) => Err(describe(&err)),
        };
        let source: Arc<str> = Arc::from(source);
        if source.len() <= MAX_REMEMBERED_SOURCE {
            let mut parsed = parsed_templates();
            if parsed.bytes + source.len() > MAX_REMEMBERED_BYTES {
                *parsed = ParsedTemplates::default();
            }
            if parsed
                .by_source
                .insert(Arc::clone(&source), variables.clone())
                .is_none()
            {
                parsed.bytes += source.len();
            }
        }
        variables.map(|variables| Self {
            source,
            variables: variables.to_vec(),
        })
    }

    pub(crate) fn variables(&self) -> &[String] {
        &self.variables
    }

    /// Hands the variable names over (to become ports), leaving none behind.
    /// The template's text, shared with every node made from it.
    pub(crate) fn source(&self) -> &Arc<str> {
        &self.source
    }

    pub(crate) fn take_variables(&mut self) -> Vec<String> {
        std::mem::take(&mut self.variables)
    }

    /// Renders with `values`; a failure reads "`failure`: what went wrong (and where)".
    pub(crate) async fn render<T: Serialize + Send + 'static>(
        &self,
        values: T,
        ctx: &dyn RunCtx,
        failure: &str,
    ) -> Result<String, BlockError> {
        self.render_sized(values, 0, ctx, failure).await
    }

    /// [`SharedTemplate::render`], the output written into room for `expected_bytes`
    /// (about what the values' texts and the template's own make): a long output is then
    /// written once, never moved as it grows.
    pub(crate) async fn render_sized<T: Serialize + Send + 'static>(
        &self,
        values: T,
        expected_bytes: usize,
        ctx: &dyn RunCtx,
        failure: &str,
    ) -> Result<String, BlockError> {
        let cancel = ctx.cancel_token().clone();
        let capacity = expected_bytes.min(MAX_OUTPUT_BYTES);
        let inline = if self.source.len() <= MAX_REMEMBERED_SOURCE {
            let env = compiled_env();
            let name = format!("{}{}", compiled_name_prefix(), self.source);
            env.get_template(&name)
                .and_then(|template| render_template(&template, &values, capacity, &cancel))
        } else {
            render_with(inline_env(), &self.source, &values, capacity, &cancel)
        };
        match inline {
            Err(err) if err.kind() == ErrorKind::OutOfFuel => {}
            result => return result.map_err(|e| render_error(&e, &cancel, failure)),
        }
        let source = Arc::clone(&self.source);
        let job_cancel = cancel.clone();
        run_cpu_bound(ctx, move || {
            render_with(pool_env(), &source, &values, capacity, &job_cancel)
        })
        .await?
        .map_err(|e| render_error(&e, &cancel, failure))
    }
}

fn render_with<T: Serialize>(
    env: &Environment<'static>,
    source: &str,
    values: &T,
    capacity: usize,
    cancel: &CancellationToken,
) -> Result<String, minijinja::Error> {
    let template = env.template_from_str(source)?;
    render_template(&template, values, capacity, cancel)
}

fn render_template<T: Serialize>(
    template: &minijinja::Template<'_, '_>,
    values: &T,
    capacity: usize,
    cancel: &CancellationToken,
) -> Result<String, minijinja::Error> {
    let mut out = CappedText {
        text: Vec::with_capacity(capacity),
        cancel,
    };
    template.render_captured_to(values, &mut out)?;
    let mut text = out.text;
    // Room the output did not use is given back (an estimate can be far off: `{{ x | length }}`).
    if text.capacity() > 2 * text.len() + 256 {
        text.shrink_to_fit();
    }
    // The output is text already: taken as it is, not copied (a long text is costly to copy).
    Ok(String::from_utf8(text)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned()))
}

fn render_error(err: &minijinja::Error, cancel: &CancellationToken, failure: &str) -> BlockError {
    if cancel.is_cancelled() {
        return BlockError::cancelled();
    }
    let why = match err.kind() {
        ErrorKind::OutOfFuel => {
            format!("it does too much work (more than {MAX_FUEL} steps); make its loops smaller")
        }
        ErrorKind::WriteFailure => format!(
            "its output passed {} MiB; make it produce less text",
            MAX_OUTPUT_BYTES >> 20
        ),
        _ => describe(err),
    };
    BlockError::permanent(format!("{failure}: {why}"))
}

/// Collects output up to [`MAX_OUTPUT_BYTES`], and stops the render once cancelled.
struct CappedText<'a> {
    text: Vec<u8>,
    cancel: &'a CancellationToken,
}

impl io::Write for CappedText<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.cancel.is_cancelled() {
            return Err(io::Error::other("cancelled"));
        }
        if self.text.len() + buf.len() > MAX_OUTPUT_BYTES {
            return Err(io::Error::other("output too large"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Says what is wrong with a template, and on which line.
pub(crate) fn describe(err: &minijinja::Error) -> String {
    let mut text = String::new();
    if let Some(line) = err.line() {
        text.push_str(&format!("line {line}: "));
    }
    text.push_str(&err.kind().to_string());
    if let Some(detail) = err.detail() {
        text.push_str(": ");
        text.push_str(detail);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_parsed_again_gives_the_same_answer_and_shares_its_source() {
        let first = SharedTemplate::parse("Hi {{ who }}, {{ greeting }}!").unwrap();
        let again = SharedTemplate::parse("Hi {{ who }}, {{ greeting }}!").unwrap();
        assert_eq!(first.variables(), ["greeting", "who"]);
        assert_eq!(again.variables(), first.variables());
        assert!(Arc::ptr_eq(&first.source, &again.source));
        // Another source is not answered from the first.
        let other = SharedTemplate::parse("Hi {{ whom }}").unwrap();
        assert_eq!(other.variables(), ["whom"]);
        // A broken one stays broken, with its reason, every time.
        let broken = SharedTemplate::parse("{{ unclosed").err().unwrap();
        assert!(broken.contains("line 1"), "{broken}");
        assert_eq!(SharedTemplate::parse("{{ unclosed").err(), Some(broken));
        // A source too long to remember is parsed all the same.
        let long = format!("{}{{{{ tail }}}}", "x".repeat(MAX_REMEMBERED_SOURCE));
        assert_eq!(SharedTemplate::parse(&long).unwrap().variables(), ["tail"]);
    }

    #[test]
    fn many_short_templates_are_not_all_kept_compiled() {
        // 2,000 distinct short templates are far under the source budget, but each keeps
        // several KiB compiled: the number kept is bounded too.
        for i in 0..2_000 {
            let name = format!("{}step {i}: {{{{ x | length }}}}", compiled_name_prefix());
            let env = compiled_env();
            let rendered = env
                .get_template(&name)
                .unwrap()
                .render(minijinja::context! { x => "abc" })
                .unwrap();
            assert_eq!(rendered, format!("step {i}: 3"));
        }
        // Other tests of this process may compile a few at the same moment.
        let kept = compiled_env().templates().count();
        assert!(
            kept <= MAX_COMPILED_TEMPLATES + 16,
            "{kept} templates kept compiled"
        );
    }
}
