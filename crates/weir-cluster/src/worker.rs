//! The worker process (`weir worker`, Flink's task manager): registers with the
//! coordinator, runs the parts of attempts it is given, and serves the data channels other
//! workers send it. When the coordinator goes away it cancels what it ran and registers
//! again once the coordinator is back.

use crate::service::{Node, connect, serve};
use crate::wire::{
    ChannelHeader, ToCoordinator, ToWorker, control_frame, decode, encode, read_control,
};
use crate::{JobDefinition, endpoint_url, job_options, lock};
use arrow_flight::{FlightData, PutResult};
use futures::StreamExt;
use futures::stream::BoxStream;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::{Response, Status, Streaming};
use weir_common::{Error, Result};
use weir_runtime::remote::{
    AttemptSpec, ChannelId, Control, Rendezvous, TaskRef, Transport, WorkerLink,
};
use weir_runtime::{JobMetrics, Message};

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The coordinator's address (`host:port` or a URL).
    pub coordinator: String,
    /// Subtasks of one vertex it runs at once (`taskmanager.numberOfTaskSlots`).
    pub slots: usize,
    /// Where its data endpoint listens (`host:port`; port 0 picks one).
    pub data_listen: String,
    /// The host its peers reach the data endpoint at (default: the listening host).
    pub advertised_host: Option<String>,
    /// How often it tells the coordinator it is alive (`heartbeat.interval`).
    pub heartbeat_interval: Duration,
}

/// Data channels from other workers waiting for the task that reads them (or the other
/// way round: a channel may connect before its task here was built).
#[derive(Default)]
pub struct Inbox(Rendezvous<(uuid::Uuid, ChannelId), mpsc::Sender<Message>>);

/// How long a data channel from another worker waits for its task here to be built.
const CHANNEL_WAIT: Duration = Duration::from_secs(60);

impl Inbox {
    fn register(&self, attempt: uuid::Uuid, channel: ChannelId, tx: mpsc::Sender<Message>) {
        self.0.register((attempt, channel), tx);
    }

    fn forget(&self, attempt: uuid::Uuid) {
        self.0.retain(|(a, _)| *a != attempt);
    }

    /// A data channel from another worker: its header, then its messages, delivered to
    /// the local channel of the task that reads it. The response ends when the channel
    /// does.
    pub(crate) async fn receive(
        self: Arc<Self>,
        mut stream: Streaming<FlightData>,
    ) -> std::result::Result<
        Response<BoxStream<'static, std::result::Result<PutResult, Status>>>,
        Status,
    > {
        let header: ChannelHeader = match stream.next().await {
            Some(Ok(frame)) => read_control(&frame).map_err(crate::service::status)?,
            _ => {
                return Err(Status::invalid_argument(
                    "a data channel starts with its header",
                ));
            }
        };
        let key = (header.attempt, header.channel);
        let Some(tx) = self.0.take(&key, CHANNEL_WAIT).await else {
            return Err(Status::not_found(format!(
                "no task here reads channel {:?} of attempt {}",
                header.channel, header.attempt
            )));
        };
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            while let Some(frame) = stream.next().await {
                let msg = match frame
                    .map_err(|e| e.message().to_string())
                    .and_then(|f| decode(f).map_err(|e| e.to_string()))
                {
                    Ok(msg) => msg,
                    Err(e) => {
                        // The reading task sees its channel close without an end, and
                        // fails: the attempt restarts.
                        tracing::warn!("data channel {:?} broke: {e}", header.channel);
                        break;
                    }
                };
                if tx.send(msg).await.is_err() {
                    break;
                }
            }
            drop(done_tx);
        });
        let ended = futures::stream::once(async move {
            let _ = done_rx.await;
        })
        .filter_map(|_| async { None });
        Ok(Response::new(ended.boxed()))
    }
}

/// Clients of other workers' data endpoints, one connection per peer.
type FlightClient =
    arrow_flight::flight_service_client::FlightServiceClient<tonic::transport::Channel>;

#[derive(Default)]
struct Peers {
    clients: Mutex<HashMap<String, FlightClient>>,
}

impl Peers {
    async fn client(&self, address: &str) -> Result<FlightClient> {
        if let Some(c) = lock(&self.clients).get(address) {
            return Ok(c.clone());
        }
        let c = connect(&endpoint_url(address)).await?;
        lock(&self.clients).insert(address.to_string(), c.clone());
        Ok(c)
    }
}

/// The channels of one attempt that cross workers, over Flight `DoPut` streams.
struct FlightTransport {
    attempt: uuid::Uuid,
    workers: Vec<String>,
    inbox: Arc<Inbox>,
    peers: Arc<Peers>,
}

impl Transport for FlightTransport {
    fn outgoing(&self, channel: ChannelId, to: usize, messages: mpsc::Receiver<Message>) {
        let (peers, address, attempt) =
            (self.peers.clone(), self.workers[to].clone(), self.attempt);
        tokio::spawn(async move {
            let mut client = match peers.client(&address).await {
                Ok(c) => c,
                Err(e) => {
                    // Dropping `messages` fails the sending task: the attempt restarts.
                    tracing::warn!("channel {channel:?} to {address}: {e}");
                    return;
                }
            };
            let head = control_frame(&ChannelHeader { attempt, channel });
            let body = tokio_stream::wrappers::ReceiverStream::new(messages)
                .map(encode)
                .take_while(move |m| {
                    if let Err(e) = m {
                        tracing::warn!("channel {channel:?}: cannot encode a message: {e}");
                    }
                    std::future::ready(m.is_ok())
                })
                .filter_map(|m| std::future::ready(m.ok()));
            match client
                .do_put(futures::stream::once(async { head }).chain(body))
                .await
            {
                Ok(response) => {
                    let mut response = response.into_inner();
                    while let Some(r) = response.next().await {
                        if let Err(e) = r {
                            tracing::warn!("channel {channel:?} to {address}: {}", e.message());
                            break;
                        }
                    }
                }
                Err(e) => tracing::warn!("channel {channel:?} to {address}: {}", e.message()),
            }
        });
    }

    fn incoming(&self, channel: ChannelId, messages: mpsc::Sender<Message>) {
        self.inbox.register(self.attempt, channel, messages);
    }
}

/// Runs a worker until the process ends: serves its data endpoint and keeps registering
/// with the coordinator.
pub async fn run(config: WorkerConfig) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(&config.data_listen)
        .await
        .map_err(|e| Error::config(format!("cannot listen on '{}': {e}", config.data_listen)))?;
    let inbox = Arc::new(Inbox::default());
    let bound = serve(Node::Worker(inbox.clone()), listener)?;
    let host = match &config.advertised_host {
        Some(h) => h.clone(),
        None if bound.ip().is_unspecified() => {
            return Err(Error::config(
                "a worker listening on all interfaces needs the host its peers reach it at \
                 (--advertised-host)",
            ));
        }
        None => bound.ip().to_string(),
    };
    let data_address = format!("{host}:{}", bound.port());
    eprintln!("weir: worker data endpoint at {data_address}");
    let peers = Arc::new(Peers::default());
    let mut announced = false;
    loop {
        match session(&config, &inbox, &peers, &data_address).await {
            Ok(()) => tracing::warn!("the coordinator closed the connection; registering again"),
            Err(e) if !announced => {
                tracing::warn!("cannot reach the coordinator: {e}; trying again every 500 ms");
                announced = true;
            }
            Err(e) => tracing::debug!("cannot reach the coordinator: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How often a worker reports its parts' row counts (they also count as heartbeats).
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The metrics of a part a worker runs, and the tasks it runs.
struct PartMetrics {
    metrics: Arc<JobMetrics>,
    tasks: Vec<TaskRef>,
}

impl PartMetrics {
    /// The part of `spec` that worker `me` runs.
    fn of(spec: &AttemptSpec, me: usize) -> PartMetrics {
        let tasks = spec
            .placement
            .iter()
            .enumerate()
            .flat_map(|(v, on)| {
                on.iter()
                    .enumerate()
                    .filter(|(_, w)| **w == me)
                    .map(move |(s, _)| (v, s))
            })
            .collect();
        PartMetrics {
            metrics: Arc::new(JobMetrics::default()),
            tasks,
        }
    }

    fn progress(&self, attempt: uuid::Uuid) -> ToCoordinator {
        ToCoordinator::Progress {
            attempt,
            rows_in: self.metrics.rows_in(),
            rows_out: self.metrics.rows_out(),
            tasks: self
                .tasks
                .iter()
                .filter_map(|&(v, s)| Some(((v, s), self.metrics.subtask(v, s)?.sample())))
                .collect(),
        }
    }
}

/// The metrics of the parts a worker runs, by attempt.
type Progress = Arc<Mutex<HashMap<uuid::Uuid, Arc<PartMetrics>>>>;

/// A running part of an attempt.
struct RunningPart {
    controls: mpsc::UnboundedSender<(TaskRef, Control)>,
    handle: tokio::task::JoinHandle<()>,
}

/// One registration with the coordinator: runs what it says until the connection ends.
async fn session(
    config: &WorkerConfig,
    inbox: &Arc<Inbox>,
    peers: &Arc<Peers>,
    data_address: &str,
) -> Result<()> {
    let mut client = connect(&endpoint_url(&config.coordinator)).await?;
    let (out, out_rx) = mpsc::unbounded_channel::<ToCoordinator>();
    let _ = out.send(ToCoordinator::Register {
        slots: config.slots,
        data_address: data_address.to_string(),
    });
    // The metrics of the parts running, reported every second.
    let progress: Progress = Default::default();
    let heartbeat = {
        let (out, every, progress) = (out.clone(), config.heartbeat_interval, progress.clone());
        tokio::spawn(async move {
            let mut beat = tokio::time::interval(every);
            let mut report = tokio::time::interval(PROGRESS_EVERY);
            loop {
                let sent = tokio::select! {
                    _ = beat.tick() => out.send(ToCoordinator::Heartbeat).is_ok(),
                    _ = report.tick() => {
                        let reports: Vec<_> = lock(&progress)
                            .iter()
                            .map(|(attempt, part)| part.progress(*attempt))
                            .collect();
                        reports.into_iter().all(|r| out.send(r).is_ok())
                    }
                };
                if !sent {
                    return;
                }
            }
        })
    };
    let outbound =
        tokio_stream::wrappers::UnboundedReceiverStream::new(out_rx).map(|m| control_frame(&m));
    let response = client.do_exchange(outbound).await;
    let mut parts: HashMap<uuid::Uuid, RunningPart> = HashMap::new();
    let result = async {
        let mut inbound = response
            .map_err(|e| Error::External(format!("the coordinator refused: {}", e.message())))?
            .into_inner();
        while let Some(frame) = inbound.next().await {
            let frame = frame.map_err(|e| Error::External(e.message().to_string()))?;
            parts.retain(|_, p| !p.handle.is_finished());
            lock(&progress).retain(|attempt, _| parts.contains_key(attempt));
            match read_control::<ToWorker>(&frame)? {
                ToWorker::Registered { worker_id } => {
                    eprintln!("weir: registered with the coordinator as worker {worker_id}");
                }
                ToWorker::Start { job, spec, me } => {
                    let attempt = spec.attempt;
                    let (controls, controls_rx) = mpsc::unbounded_channel();
                    let metrics = Arc::new(PartMetrics::of(&spec, me));
                    lock(&progress).insert(attempt, metrics.clone());
                    let handle = tokio::spawn(run_attempt_part(
                        job,
                        spec,
                        me,
                        (inbox.clone(), peers.clone()),
                        controls_rx,
                        out.clone(),
                        metrics,
                    ));
                    parts.insert(attempt, RunningPart { controls, handle });
                }
                ToWorker::Control {
                    attempt,
                    task,
                    control,
                } => {
                    if let Some(p) = parts.get(&attempt) {
                        let _ = p.controls.send((task, control));
                    }
                }
                ToWorker::Cancel { attempt } => {
                    if let Some(p) = parts.remove(&attempt) {
                        p.handle.abort();
                        tracing::info!("attempt {attempt} cancelled by the coordinator");
                    }
                    inbox.forget(attempt);
                }
            }
        }
        Ok(())
    }
    .await;
    heartbeat.abort();
    for (attempt, p) in parts {
        p.handle.abort();
        inbox.forget(attempt);
    }
    result
}

/// Compiles the job and runs this worker's part of the attempt, forwarding its tasks'
/// events; reports the end to the coordinator.
async fn run_attempt_part(
    job: JobDefinition,
    spec: AttemptSpec,
    me: usize,
    (inbox, peers): (Arc<Inbox>, Arc<Peers>),
    controls: mpsc::UnboundedReceiver<(TaskRef, Control)>,
    out: mpsc::UnboundedSender<ToCoordinator>,
    part: Arc<PartMetrics>,
) {
    let attempt = spec.attempt;
    let result = async {
        let (engine, graph) = job.compile().await?;
        let opts = job_options(&engine);
        let (events, mut events_rx) = mpsc::unbounded_channel();
        let forward = {
            let out = out.clone();
            tokio::spawn(async move {
                while let Some(event) = events_rx.recv().await {
                    let _ = out.send(ToCoordinator::Event { attempt, event });
                }
            })
        };
        let transport = Arc::new(FlightTransport {
            attempt,
            workers: spec.workers.clone(),
            inbox: inbox.clone(),
            peers,
        });
        // Early checkpoints the tasks ask for are the coordinator's to take.
        let checkpoint_requests = Arc::new(tokio::sync::Notify::new());
        let requests = {
            let (out, asked) = (out.clone(), checkpoint_requests.clone());
            tokio::spawn(async move {
                loop {
                    asked.notified().await;
                    if out
                        .send(ToCoordinator::RequestCheckpoint { attempt })
                        .is_err()
                    {
                        return;
                    }
                }
            })
        };
        let link = WorkerLink {
            controls,
            events,
            metrics: part.metrics.clone(),
            checkpoint_requests,
        };
        let ran = weir_runtime::remote::run_part(graph, opts, spec, me, transport, link).await;
        requests.abort();
        // Every event the tasks sent goes out before the end of the part.
        let _ = tokio::time::timeout(Duration::from_secs(10), forward).await;
        drop(engine);
        ran
    }
    .await;
    inbox.forget(attempt);
    if let Err(e) = &result {
        tracing::warn!("attempt {attempt}: this worker's part failed: {e}");
    }
    let _ = out.send(part.progress(attempt));
    let _ = out.send(ToCoordinator::PartEnded {
        attempt,
        error: result.err().map(|e| e.to_string()),
    });
}
