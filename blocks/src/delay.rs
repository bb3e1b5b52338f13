//! `control.delay`: waits, then hands its input on.

use std::sync::Arc;
use std::time::Duration;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, ValueMap, ValueType, async_trait,
};

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(Delay::new())]
}

struct Delay {
    meta: BlockMeta,
}

impl Delay {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "control.delay",
                "Delay",
                "Control",
                "Waits a while, then passes its input on unchanged.",
            )
            .field(
                ConfigField::integer("ms", "Wait (ms)", Some(0), None)
                    .default_value(serde_json::json!(1000))
                    .help("How long to wait, in milliseconds."),
            ),
        }
    }
}

impl Block for Delay {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let ms = ConfigReader(config).u64_or("ms", 1000)?;
        Ok(Arc::new(DelayNode {
            wait: Duration::from_millis(ms),
            ports: Ports::new(
                vec![PortSpec::new("value", ValueType::Any)],
                vec![PortSpec::new("value", ValueType::Any)],
            ),
        }))
    }
}

struct DelayNode {
    wait: Duration,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for DelayNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let value = inputs.take_value("value")?;
        tokio::select! {
            () = ctx.cancel_token().cancelled() => Err(BlockError::cancelled()),
            () = tokio::time::sleep(self.wait) => Ok(agentloom_core::outputs([("value", value)])),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{TestCtx, config_error, inputs, run_block, run_block_with};
    use agentloom_core::{ErrorClass, Value};
    use serde_json::json;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn waits_then_passes_the_value() {
        let started = Instant::now();
        let out = run_block(
            "control.delay",
            json!({"ms": 60}),
            inputs([("value", Value::Integer(5))]),
        )
        .await
        .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(60));
        assert_eq!(out, inputs([("value", Value::Integer(5))]));
    }

    #[tokio::test]
    async fn cancellation_stops_the_wait() {
        let ctx = std::sync::Arc::new(TestCtx::new());
        let canceller = ctx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            canceller.cancel();
        });
        let started = Instant::now();
        let err = run_block_with(
            &ctx,
            "control.delay",
            json!({"ms": 60_000}),
            inputs([("value", Value::Null)]),
        )
        .await
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::Cancelled);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn negative_wait_is_refused() {
        let err = config_error("control.delay", json!({"ms": -1})).unwrap();
        assert!(
            err.starts_with("config `ms`: expected a whole number"),
            "{err}"
        );
    }
}
