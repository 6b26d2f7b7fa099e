//! ROS 2 services <-> HPRM ports: HPRM calling a ROS service
//! ([`Caller`]), and a ROS service answered by an HPRM reaction
//! ([`ServiceSupport::serve`], [`Responder`]).
//!
//! Requests and responses convert field by field, like plain messages
//! (`messages::plain_to_value`); fields a value leaves out take their
//! defaults. Supported: every service type of the packages r2r was built
//! with ([`support`]).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use futures::{FutureExt, StreamExt};
use r2r::{QosProfile, WrappedServiceTypeSupport};

use crate::messages::{plain_from_value, plain_to_value, ConvertError, LocalTask};
use crate::value::Value;

/// A pending response.
pub type Response = Pin<Box<dyn Future<Output = Result<Value, ConvertError>> + Send>>;

/// Calls one ROS service.
pub trait Caller: Send {
    fn call(&self, request: Value) -> Result<Response, ConvertError>;
}

/// Answers one request of a served service.
pub trait Responder: Send {
    fn respond(self: Box<Self>, response: Value) -> Result<(), ConvertError>;
}

/// Where requests to a served service go.
pub type RequestSink = Box<dyn FnMut(Result<(Value, Box<dyn Responder>), ConvertError>) + Send>;

/// How the bridge handles one service type.
pub trait ServiceSupport {
    fn client(&self, node: &mut r2r::Node, service: &str) -> Result<Box<dyn Caller>, r2r::Error>;
    fn serve(&self, node: &mut r2r::Node, service: &str, sink: RequestSink) -> Result<LocalTask, r2r::Error>;
}

/// The service types r2r was built with (build.rs lists them), each
/// through its Rust structs: r2r 0.9 has no untyped service server.
macro_rules! service_table {
    ($($name:literal => $t:ty,)*) => {
        /// The support of service type `name`; `None` when r2r was not
        /// built with it.
        pub fn support(name: &str) -> Option<Box<dyn ServiceSupport>> {
            match name {
                $($name => Some(Box::new(Typed::<$t>(PhantomData, $name))),)*
                _ => None,
            }
        }
    };
}

// The action table of the same file is `actions`' to expand.
macro_rules! action_table {
    ($($t:tt)*) => {};
}

include!(concat!(env!("OUT_DIR"), "/interfaces.rs"));

/// A service type's Rust structs, and its ROS name.
struct Typed<S>(PhantomData<fn() -> S>, &'static str);

struct TypedCaller<S: WrappedServiceTypeSupport>(r2r::Client<S>, &'static str);

impl<S: WrappedServiceTypeSupport + 'static> Caller for TypedCaller<S>
where
    S::Request: Send,
    S::Response: Send,
{
    fn call(&self, request: Value) -> Result<Response, ConvertError> {
        let name = self.1;
        let req: S::Request = plain_from_value(name, request)?;
        let fut = self.0.request(&req).map_err(|e| ConvertError::Ros(format!("calling {name}: {e}")))?;
        Ok(async move {
            match fut.await {
                Ok(resp) => plain_to_value(name, &resp),
                Err(e) => Err(ConvertError::Ros(format!("{name} call failed: {e}"))),
            }
        }
        .boxed())
    }
}

struct TypedResponder<S: WrappedServiceTypeSupport>(r2r::ServiceRequest<S>, &'static str);

impl<S: WrappedServiceTypeSupport + 'static> Responder for TypedResponder<S>
where
    S::Request: Send,
    S::Response: Send,
{
    fn respond(self: Box<Self>, response: Value) -> Result<(), ConvertError> {
        let name = self.1;
        let resp: S::Response = plain_from_value(name, response)?;
        self.0.respond(resp).map_err(|e| ConvertError::Ros(format!("responding to {name}: {e}")))
    }
}

impl<S: WrappedServiceTypeSupport + Send + 'static> ServiceSupport for Typed<S>
where
    S::Request: Send,
    S::Response: Send,
{
    fn client(&self, node: &mut r2r::Node, service: &str) -> Result<Box<dyn Caller>, r2r::Error> {
        Ok(Box::new(TypedCaller(node.create_client::<S>(service, QosProfile::services_default())?, self.1)))
    }

    fn serve(&self, node: &mut r2r::Node, service: &str, mut sink: RequestSink) -> Result<LocalTask, r2r::Error> {
        let name = self.1;
        let requests = node.create_service::<S>(service, QosProfile::services_default())?;
        Ok(Box::pin(requests.for_each(move |req| {
            let v = plain_to_value(name, &req.message);
            sink(v.map(|v| (v, Box::new(TypedResponder(req, name)) as Box<dyn Responder>)));
            std::future::ready(())
        })))
    }
}
