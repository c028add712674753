//! What tally's server and worker share for `/metrics`:
//!
//! - [`render`]: a registry in the OpenMetrics text format, with the
//!   content type ([`CONTENT_TYPE`]) that makes Prometheus parse it as such;
//! - [`process::ProcessCollector`]: `process_*` metrics read from `/proc` at
//!   each scrape (resident memory, CPU seconds, open and max fds, start time);
//! - [`register_build_info`]: `tally_build_info` with `version` and `git_sha`;
//! - [`exposition`]: a parser of the text format, for tests that scrape;
//! - [`traces`]: logs, and OpenTelemetry traces over OTLP when configured;
//! - [`http_listener`]: the plain HTTP listener both serve `/metrics` on,
//!   with header and body timeouts and a connection cap.

pub mod exposition;
pub mod http_listener;
pub mod process;
pub mod traces;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry's samples in the OpenMetrics text format (ending `# EOF`).
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; an encoding error would be a bug in
    // a label's encoder, and a scrape still gets what was written.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    git_sha: String,
}

/// The git commit this binary was built from (`tally_version::COMMIT`:
/// `TALLY_GIT_SHA` at build time, else a release build's `git rev-parse
/// HEAD`, else `unknown`).
pub const GIT_SHA: &str = tally_version::COMMIT;

/// Registers `tally_build_info{version,git_sha} 1`, and the process
/// metrics, which every tally binary exports alike.
pub fn register_build_info(registry: &mut Registry, version: &str) {
    registry.register(
        "tally_build",
        "the version and git commit of this binary (always 1)",
        Info::new(BuildLabels {
            version: version.to_string(),
            git_sha: GIT_SHA.to_string(),
        }),
    );
    registry.register_collector(Box::new(process::ProcessCollector::new()));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build info renders as an info metric (name ends `_info`, value 1)
    /// and the process metrics come with it.
    #[test]
    fn build_info_and_process_metrics_render() {
        let mut r = Registry::default();
        register_build_info(&mut r, "1.2.3");
        let text = render(&r);
        let scrape = exposition::parse(&text).unwrap();
        let info = scrape.family("tally_build").unwrap();
        assert_eq!(info.kind, "info");
        let s = scrape.sample(
            "tally_build_info",
            &[("version", "1.2.3"), ("git_sha", GIT_SHA)],
        );
        assert_eq!(s, Some(1.0), "{text}");
        assert!(text.ends_with("# EOF\n"));
        #[cfg(target_os = "linux")]
        assert!(scrape.sample("process_resident_memory_bytes", &[]).unwrap() > 0.0);
    }
}
