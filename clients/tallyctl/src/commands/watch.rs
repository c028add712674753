//! `tallyctl watch <ledger>`: a progress bar per active job and one for the
//! ledger, until every row is SUCCEEDED, PERMANENT or BLOCKED.
//!
//! Two sources, because either may be missing or lag:
//! - SummarizeLedger, polled every `--interval`, decides when the ledger is
//!   done (it is the truth about rows);
//! - WatchJobs moves the job bars as events arrive. The stream is resumed
//!   from the last sequence seen after any transient error (so no event is
//!   missed across a reconnect); when the server answers UNIMPLEMENTED (or
//!   the stream is down), the job bars are refreshed by ListJobs on each
//!   poll instead, and when that is unimplemented too only the ledger bar
//!   is shown.

use crate::cli::WatchArgs;
use crate::commands::jobs::{job_counts, job_line, list_jobs};
use crate::commands::rows::{permanent_exit, summarize, summary_text};
use crate::connect::Svc;
use crate::error::{CliError, ExitCode};
use crate::{Ctx, ledger_name, render};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::time::Duration;
use tally_proto::v1 as pb;
use tally_proto::v1::job_service_client::JobServiceClient;
use tokio::sync::mpsc;
use tonic::Code;

/// What the stream task tells the display.
#[derive(Debug)]
pub enum StreamNews {
    /// Connected (or reconnected) and reading.
    Live,
    Event(Box<pb::JobEvent>),
    /// The stream broke; it reconnects after `retry_in`.
    Down {
        status: tonic::Status,
        retry_in: Duration,
    },
    /// WatchJobs is not available here: poll instead.
    Unavailable(tonic::Status),
    /// A failure that retrying will not fix (e.g. UNAUTHENTICATED).
    Fatal(tonic::Status),
}

/// Whether a failed stream is worth reconnecting.
pub fn stream_disposition(code: Code) -> Disposition {
    match code {
        Code::Unimplemented => Disposition::Unsupported,
        Code::Unavailable
        | Code::Internal
        | Code::Unknown
        | Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::ResourceExhausted
        | Code::DataLoss => Disposition::Reconnect,
        Code::Ok
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unauthenticated => Disposition::Fatal,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    Reconnect,
    Unsupported,
    Fatal,
}

const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Reads WatchJobs forever, resuming after the last sequence seen.
pub async fn stream_jobs(
    mut client: JobServiceClient<Svc>,
    parent: String,
    tx: mpsc::Sender<StreamNews>,
) {
    // 0: from now. The display lists current jobs itself first.
    let mut after = 0i64;
    let mut backoff = Duration::from_millis(500);
    loop {
        let failure = match client
            .watch_jobs(pb::WatchJobsRequest {
                parent: parent.clone(),
                after_sequence: after,
            })
            .await
        {
            Ok(resp) => {
                if tx.send(StreamNews::Live).await.is_err() {
                    return;
                }
                let mut stream = resp.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(event)) => {
                            after = after.max(event.sequence);
                            backoff = Duration::from_millis(500);
                            if tx.send(StreamNews::Event(Box::new(event))).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => {
                            break tonic::Status::unavailable("the server ended the stream");
                        }
                        Err(status) => break status,
                    }
                }
            }
            Err(status) => status,
        };
        let news = match stream_disposition(failure.code()) {
            Disposition::Unsupported => {
                let _ = tx.send(StreamNews::Unavailable(failure)).await;
                return;
            }
            Disposition::Fatal => {
                let _ = tx.send(StreamNews::Fatal(failure)).await;
                return;
            }
            Disposition::Reconnect => StreamNews::Down {
                status: failure,
                retry_in: backoff,
            },
        };
        if tx.send(news).await.is_err() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The bars, or plain lines when there is no terminal.
struct Display {
    multi: MultiProgress,
    ledger: ProgressBar,
    jobs: HashMap<String, ProgressBar>,
    interactive: bool,
    json: bool,
    last_line: String,
}

impl Display {
    fn new(interactive: bool, json: bool, first: &pb::LedgerSummary) -> Self {
        let multi = MultiProgress::new();
        if !interactive {
            multi.set_draw_target(ProgressDrawTarget::hidden());
        }
        let ledger = multi.add(ProgressBar::new(first.total.max(0) as u64));
        ledger.set_style(
            ProgressStyle::with_template("{prefix:>14} [{bar:40}] {pos}/{len} {wide_msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        ledger.set_prefix("ledger");
        Display {
            multi,
            ledger,
            jobs: HashMap::new(),
            interactive,
            json,
            last_line: String::new(),
        }
    }

    /// A line above the bars (or on stdout without a terminal).
    fn note(&self, text: &str) {
        if self.json {
            return;
        }
        if self.interactive {
            let _ = self.multi.println(text);
        } else {
            println!("{text}");
        }
    }

    fn summary(&mut self, s: &pb::LedgerSummary) {
        self.ledger.set_length(s.total.max(0) as u64);
        self.ledger
            .set_position((s.succeeded + s.permanent + s.blocked).max(0) as u64);
        self.ledger.set_message(s.summary_line.clone());
        if !self.interactive && s.summary_line != self.last_line {
            self.last_line = s.summary_line.clone();
            self.note(&format!("ledger {}", s.summary_line));
        }
    }

    fn job(&mut self, j: &pb::Job) {
        let c = job_counts(j);
        let done = j.state == pb::JobState::Reconciled as i32;
        if done {
            if let Some(bar) = self.jobs.remove(&j.name) {
                bar.finish_and_clear();
                self.multi.remove(&bar);
                self.note(&job_line(j));
            }
            return;
        }
        let new = !self.jobs.contains_key(&j.name);
        let bar = self.jobs.entry(j.name.clone()).or_insert_with(|| {
            let bar = self.multi.insert_before(&self.ledger, ProgressBar::new(0));
            bar.set_style(
                ProgressStyle::with_template("{prefix:>14} [{bar:40}] {pos}/{len} {wide_msg}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.set_prefix(crate::table::truncate(&j.job_id, 14));
            bar
        });
        bar.set_length(c.rows.max(0) as u64);
        bar.set_position((c.rows - c.unreported).max(0) as u64);
        let state = render::job_state(j.state);
        let changed = bar.message() != state;
        bar.set_message(state);
        if !self.interactive && (new || changed) {
            self.note(&job_line(j));
        }
    }

    /// Jobs listed by a poll: bars for each; bars of jobs no longer listed
    /// (reconciled since) are closed.
    fn job_list(&mut self, jobs: &[pb::Job]) {
        let listed: std::collections::HashSet<&str> =
            jobs.iter().map(|j| j.name.as_str()).collect();
        let gone: Vec<String> = self
            .jobs
            .keys()
            .filter(|k| !listed.contains(k.as_str()))
            .cloned()
            .collect();
        for name in gone {
            if let Some(bar) = self.jobs.remove(&name) {
                bar.finish_and_clear();
                self.multi.remove(&bar);
            }
        }
        for j in jobs {
            self.job(j);
        }
    }

    fn finish(self) {
        for bar in self.jobs.values() {
            bar.finish_and_clear();
        }
        self.ledger.finish_and_clear();
        let _ = self.multi.clear();
    }
}

/// Every job state but RECONCILED: the jobs a bar is shown for.
fn active_states() -> Vec<i32> {
    [
        pb::JobState::Preparing,
        pb::JobState::Creating,
        pb::JobState::Submitted,
        pb::JobState::Running,
        pb::JobState::Succeeded,
        pb::JobState::Failed,
        pb::JobState::Cancelled,
        pb::JobState::Expired,
    ]
    .into_iter()
    .map(|s| s as i32)
    .collect()
}

pub async fn run(ctx: &mut Ctx, args: WatchArgs) -> Result<ExitCode, CliError> {
    let parent = ledger_name(&args.ledger);
    let interval = humantime::parse_duration(&args.interval)
        .map_err(|e| CliError::usage(format!("--interval: {e}")))?;
    if interval.is_zero() {
        return Err(CliError::usage("--interval must be more than 0"));
    }
    // The summary first: an unknown ledger fails here, before any stream.
    let mut summary = summarize(ctx, &parent).await?;
    let mut display = Display::new(ctx.interactive, ctx.json, &summary);
    display.summary(&summary);

    // Current jobs, then events from now on. ListJobs unimplemented: no bars.
    let mut can_list_jobs = true;
    match list_jobs(ctx, &parent, &active_states(), 0).await {
        Ok((jobs, _)) => display.job_list(&jobs),
        Err(s) if s.code() == Code::Unimplemented => {
            can_list_jobs = false;
            display.note("(the server has no JobService yet: showing the ledger only)");
        }
        Err(s) => return Err(CliError::server(format!("list jobs of {parent}"), s)),
    }

    let (tx, mut rx) = mpsc::channel(256);
    let stream = tokio::spawn(stream_jobs(ctx.clients.jobs.clone(), parent.clone(), tx));
    let mut stream_live = false;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks = 0u64;
    let result = loop {
        tokio::select! {
            _ = ticker.tick() => {
                ticks += 1;
                match summarize(ctx, &parent).await {
                    Ok(s) => {
                        summary = s;
                        display.summary(&summary);
                        if render::is_terminal(&summary) {
                            break Ok(());
                        }
                    }
                    // A server restart or a network blip: keep watching.
                    Err(e) if matches!(e.grpc_code(), Some(c) if stream_disposition(c) == Disposition::Reconnect) => {
                        display.ledger.set_message(format!("(retrying) {e}"));
                        continue;
                    }
                    Err(e) => break Err(e),
                }
                // Without a live stream, poll the jobs; with one, re-list now
                // and then to close bars of jobs whose events fell between
                // the first listing and the stream's start.
                if can_list_jobs && (!stream_live || ticks.is_multiple_of(10)) {
                    match list_jobs(ctx, &parent, &active_states(), 0).await {
                        Ok((jobs, _)) => display.job_list(&jobs),
                        Err(s) if s.code() == Code::Unimplemented => can_list_jobs = false,
                        Err(_) => {}
                    }
                }
            }
            Some(news) = rx.recv() => match news {
                StreamNews::Live => stream_live = true,
                StreamNews::Event(e) => {
                    if let Some(job) = &e.job {
                        display.job(job);
                    }
                    if e.r#type == pb::JobEventType::LedgerPaused as i32 {
                        display.note(&format!(
                            "ledger {}",
                            render::ledger_state_text(
                                pb::LedgerState::Paused as i32,
                                e.pause.as_ref()
                            )
                        ));
                    } else if e.r#type == pb::JobEventType::LedgerResumed as i32 {
                        display.note(&format!("ledger resumed by {}", e.actor));
                    }
                }
                StreamNews::Down { status, retry_in } => {
                    stream_live = false;
                    display.note(&format!(
                        "(job stream interrupted: {}; resuming in {})",
                        crate::error::describe_status("", &status).replace('\n', " "),
                        humantime::format_duration(retry_in)
                    ));
                }
                StreamNews::Unavailable(_) => {
                    stream_live = false;
                    if can_list_jobs {
                        display.note("(the server does not stream job events: polling)");
                    }
                }
                StreamNews::Fatal(status) => {
                    break Err(CliError::server(format!("watch jobs of {parent}"), status));
                }
            },
        }
    };
    stream.abort();
    display.finish();
    result?;
    if ctx.json {
        ctx.print_json(&render::summary_json(&summary));
    } else {
        print!("{}", summary_text(&summary, false));
    }
    Ok(permanent_exit(&summary, args.fail_on_permanent))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tally_proto::v1::job_service_server::{JobService, JobServiceServer};
    use tonic::{Request, Response, Status};

    /// A JobService whose WatchJobs follows a script, one entry per call:
    /// events to send, then how the stream ends.
    struct Scripted {
        calls: Arc<Mutex<Vec<i64>>>,
        script: Mutex<Vec<(Vec<i64>, Option<Status>)>>,
    }

    type Unary<T> = Result<Response<T>, Status>;

    #[tonic::async_trait]
    impl JobService for Scripted {
        async fn create_job(&self, _: Request<pb::CreateJobRequest>) -> Unary<pb::Job> {
            Err(Status::unimplemented(""))
        }
        async fn acquire_capacity(
            &self,
            _: Request<pb::AcquireCapacityRequest>,
        ) -> Unary<pb::AcquireCapacityResponse> {
            Err(Status::unimplemented(""))
        }
        async fn get_job(&self, _: Request<pb::GetJobRequest>) -> Unary<pb::Job> {
            Err(Status::unimplemented(""))
        }
        async fn list_jobs(&self, _: Request<pb::ListJobsRequest>) -> Unary<pb::ListJobsResponse> {
            Err(Status::unimplemented(""))
        }
        async fn mark_creating(&self, _: Request<pb::MarkCreatingRequest>) -> Unary<pb::Job> {
            Err(Status::unimplemented(""))
        }
        async fn mark_submitted(&self, _: Request<pb::MarkSubmittedRequest>) -> Unary<pb::Job> {
            Err(Status::unimplemented(""))
        }
        async fn mark_not_created(&self, _: Request<pb::MarkNotCreatedRequest>) -> Unary<pb::Job> {
            Err(Status::unimplemented(""))
        }
        async fn flag_create_unresolved(
            &self,
            _: Request<pb::FlagCreateUnresolvedRequest>,
        ) -> Unary<pb::Job> {
            Err(Status::unimplemented(""))
        }
        async fn adopt_jobs(
            &self,
            _: Request<pb::AdoptJobsRequest>,
        ) -> Unary<pb::AdoptJobsResponse> {
            Err(Status::unimplemented(""))
        }
        async fn hand_over_job(&self, _: Request<pb::HandOverJobRequest>) -> Unary<pb::Job> {
            Err(Status::unimplemented(""))
        }
        async fn finish_job(&self, _: Request<pb::FinishJobRequest>) -> Unary<pb::Job> {
            Err(Status::unimplemented(""))
        }
        type WatchJobsStream =
            futures::stream::Iter<std::vec::IntoIter<Result<pb::JobEvent, Status>>>;
        async fn watch_jobs(
            &self,
            req: Request<pb::WatchJobsRequest>,
        ) -> Unary<Self::WatchJobsStream> {
            self.calls
                .lock()
                .unwrap()
                .push(req.get_ref().after_sequence);
            let mut script = self.script.lock().unwrap();
            if script.is_empty() {
                return Err(Status::unimplemented("WatchJobs is not implemented yet"));
            }
            let (events, end) = script.remove(0);
            let mut items: Vec<Result<pb::JobEvent, Status>> = events
                .into_iter()
                .map(|sequence| {
                    Ok(pb::JobEvent {
                        sequence,
                        ..Default::default()
                    })
                })
                .collect();
            if let Some(status) = end {
                items.push(Err(status));
            }
            Ok(Response::new(futures::stream::iter(items)))
        }
        async fn acquire_lock(
            &self,
            _: Request<pb::AcquireLockRequest>,
        ) -> Unary<pb::AcquireLockResponse> {
            Err(Status::unimplemented(""))
        }
        async fn renew_lock(&self, _: Request<pb::RenewLockRequest>) -> Unary<pb::Lock> {
            Err(Status::unimplemented(""))
        }
        async fn release_lock(&self, _: Request<pb::ReleaseLockRequest>) -> Unary<()> {
            Err(Status::unimplemented(""))
        }
        async fn report_golden_results(
            &self,
            _: Request<pb::ReportGoldenResultsRequest>,
        ) -> Unary<pb::ReportGoldenResultsResponse> {
            Err(Status::unimplemented(""))
        }
        async fn lookup_media_uploads(
            &self,
            _: Request<pb::LookupMediaUploadsRequest>,
        ) -> Unary<pb::LookupMediaUploadsResponse> {
            Err(Status::unimplemented(""))
        }
        async fn record_media_upload(
            &self,
            _: Request<pb::RecordMediaUploadRequest>,
        ) -> Unary<pb::MediaUpload> {
            Err(Status::unimplemented(""))
        }
        async fn list_media_uploads(
            &self,
            _: Request<pb::ListMediaUploadsRequest>,
        ) -> Unary<pb::ListMediaUploadsResponse> {
            Err(Status::unimplemented(""))
        }
        async fn forget_media_upload(&self, _: Request<pb::ForgetMediaUploadRequest>) -> Unary<()> {
            Err(Status::unimplemented(""))
        }
    }

    #[tokio::test]
    async fn the_job_stream_resumes_after_the_last_sequence_seen() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let fake = Scripted {
            calls: calls.clone(),
            script: Mutex::new(vec![
                // Two events, then the connection breaks.
                (vec![1, 2], Some(Status::unavailable("connection reset"))),
                // One more, then the server ends the stream (max age).
                (vec![3], None),
                // Nothing new; an internal error.
                (vec![], Some(Status::internal("oops"))),
            ]),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(JobServiceServer::new(fake))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let clients = crate::connect::Target {
            server: format!("http://{addr}"),
            ..Default::default()
        }
        .connect()
        .unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        // The script ends with UNIMPLEMENTED, which ends the task.
        stream_jobs(clients.jobs, "ledgers/x".into(), tx).await;
        let mut news = Vec::new();
        while let Some(n) = rx.recv().await {
            news.push(match n {
                StreamNews::Live => "live".to_string(),
                StreamNews::Event(e) => format!("event {}", e.sequence),
                StreamNews::Down { status, .. } => format!("down {:?}", status.code()),
                StreamNews::Unavailable(_) => "unavailable".to_string(),
                StreamNews::Fatal(s) => format!("fatal {:?}", s.code()),
            });
        }
        assert_eq!(
            news,
            [
                "live",
                "event 1",
                "event 2",
                "down Unavailable",
                "live",
                "event 3",
                "down Unavailable",
                "live",
                "down Internal",
                "unavailable",
            ]
        );
        // Each reconnect asked for what came after the last event seen.
        assert_eq!(*calls.lock().unwrap(), [0, 2, 3, 3]);
        server.abort();
    }

    #[test]
    fn which_stream_failures_are_retried() {
        assert_eq!(
            stream_disposition(Code::Unavailable),
            Disposition::Reconnect
        );
        assert_eq!(stream_disposition(Code::Internal), Disposition::Reconnect);
        assert_eq!(
            stream_disposition(Code::Unimplemented),
            Disposition::Unsupported
        );
        assert_eq!(
            stream_disposition(Code::Unauthenticated),
            Disposition::Fatal
        );
        assert_eq!(stream_disposition(Code::NotFound), Disposition::Fatal);
    }
}
