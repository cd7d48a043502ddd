//! The Flight service of a coordinator or worker process: `DoExchange` is a worker's
//! control stream (coordinator), `DoAction` `submit` a job submission (coordinator),
//! `DoPut` a data channel from another worker (worker). Everything else is refused.

use crate::coordinator::CoordinatorState;
use crate::worker::Inbox;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::stream::BoxStream;
use std::net::SocketAddr;
use std::sync::Arc;
use tonic::{Request, Response, Status, Streaming};
use weir_common::{Error, Result};

/// What one process serves.
#[derive(Clone)]
pub(crate) enum Node {
    Coordinator(Arc<CoordinatorState>),
    Worker(Arc<Inbox>),
}

type Stream<T> = BoxStream<'static, std::result::Result<T, Status>>;

fn refused<T>(what: &str) -> std::result::Result<T, Status> {
    Err(Status::unimplemented(format!(
        "{what} is not served by Weir"
    )))
}

#[tonic::async_trait]
impl FlightService for Node {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        refused("Handshake")
    }

    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        refused("ListFlights")
    }

    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        refused("GetFlightInfo")
    }

    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<PollInfo>, Status> {
        refused("PollFlightInfo")
    }

    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<SchemaResult>, Status> {
        refused("GetSchema")
    }

    async fn do_get(
        &self,
        _: Request<Ticket>,
    ) -> std::result::Result<Response<Self::DoGetStream>, Status> {
        refused("DoGet")
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        match self {
            Node::Worker(inbox) => inbox.clone().receive(request.into_inner()).await,
            Node::Coordinator(_) => refused("DoPut on a coordinator"),
        }
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        match self {
            Node::Coordinator(c) => c.clone().worker_stream(request.into_inner()).await,
            Node::Worker(_) => refused("DoExchange on a worker"),
        }
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        match self {
            Node::Coordinator(c) => c.clone().action(request.into_inner()).await,
            Node::Worker(_) => refused("DoAction on a worker"),
        }
    }

    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        refused("ListActions")
    }
}

/// Messages of any size (a batch of long strings is more than tonic's 4 MB default).
pub(crate) const MAX_MESSAGE: usize = usize::MAX;

/// Serves `node` on `listener` until the process ends.
pub(crate) fn serve(node: Node, listener: tokio::net::TcpListener) -> Result<SocketAddr> {
    let address = listener
        .local_addr()
        .map_err(|e| Error::External(format!("cannot read the listening address: {e}")))?;
    let service = FlightServiceServer::new(node)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .initial_stream_window_size(Some(WINDOW))
            .initial_connection_window_size(Some(WINDOW * 4))
            .tcp_nodelay(true)
            .add_service(service)
            .serve_with_incoming(incoming)
            .await;
        if let Err(e) = served {
            tracing::error!("the Flight service stopped: {e}");
        }
    });
    Ok(address)
}

/// HTTP/2 flow-control window of a stream: how many bytes of a data channel may be in
/// flight between two workers before the sender waits.
pub(crate) const WINDOW: u32 = 4 << 20;

/// Connects a Flight client to `url`.
pub(crate) async fn connect(
    url: &str,
) -> Result<arrow_flight::flight_service_client::FlightServiceClient<tonic::transport::Channel>> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| Error::config(format!("'{url}' is not a valid address: {e}")))?
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(WINDOW * 4))
        .tcp_nodelay(true)
        .connect_timeout(std::time::Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| Error::External(format!("cannot connect to {url}: {e}")))?;
    Ok(
        arrow_flight::flight_service_client::FlightServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
    )
}

/// A mistake in what the user gave (SQL, options), as opposed to a failure while running.
pub(crate) fn is_user_error(e: &Error) -> bool {
    matches!(e, Error::Config(_) | Error::Sql { .. } | Error::Plan(_))
}

/// A tonic status for an error.
pub(crate) fn status(e: Error) -> Status {
    if is_user_error(&e) {
        Status::invalid_argument(e.to_string())
    } else {
        Status::internal(e.to_string())
    }
}
