//! The emulator kit's view of this emulator: the state (`service`)
//! answering through its routes (`routes`). Kept apart so that the state
//! does not reach up into the HTTP handlers that read it.

use crate::config::EmulatorConfig;
use crate::faults::{FaultPlan, FaultPlanError};
use crate::service::{ConfigError, Shared};
use crate::stats::Stats;
use emulator_kit::emulator::{Served, Service};
use std::sync::Arc;

impl Service for Shared {
    const NAME: &'static str = "gemini emulator";
    type Config = EmulatorConfig;
    type Stats = Stats;
    type Plan = FaultPlan;
    type PlanError = FaultPlanError;
    type ConfigError = ConfigError;

    fn new(config: EmulatorConfig, base_url: String) -> Result<Arc<Self>, ConfigError> {
        Shared::build(config, base_url)
    }
    fn router(self: Arc<Self>) -> axum::Router {
        crate::routes::router(self)
    }
    fn served(&self) -> &Served {
        self.served_state()
    }
    fn api_key(&self) -> &str {
        self.key()
    }
    fn stats(&self) -> Stats {
        self.stats_now()
    }
    fn set_faults(&self, plan: FaultPlan) -> Result<(), FaultPlanError> {
        self.put_faults(plan)
    }
}
