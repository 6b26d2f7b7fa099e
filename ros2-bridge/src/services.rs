//! ROS 2 services <-> HPRM ports: HPRM calling a ROS service
//! ([`Caller`]), and a ROS service answered by an HPRM reaction
//! ([`ServiceSupport::serve`], [`Responder`]).
//!
//! Requests and responses convert field by field, like plain messages
//! (`messages::plain_to_value`). Supported: the std_srvs services
//! ([`SUPPORTED`]).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use futures::{FutureExt, StreamExt};
use r2r::{QosProfile, WrappedServiceTypeSupport};
use serde::de::DeserializeOwned;
use serde::Serialize;

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

/// A service type with Rust structs in r2r, and its ROS name.
trait NamedService: WrappedServiceTypeSupport + Send + 'static
where
    Self::Request: Serialize + DeserializeOwned + Default + Send,
    Self::Response: Serialize + DeserializeOwned + Default + Send,
{
    const NAME: &'static str;
}

macro_rules! std_srvs {
    ($($srv:ident),*) => {
        $(impl NamedService for r2r::std_srvs::srv::$srv::Service {
            const NAME: &'static str = concat!("std_srvs/srv/", stringify!($srv));
        })*
        /// The service types the bridge carries.
        pub const SUPPORTED: &[&str] = &[$(concat!("std_srvs/srv/", stringify!($srv))),*];

        pub fn support(name: &str) -> Option<Box<dyn ServiceSupport>> {
            $(if name == <r2r::std_srvs::srv::$srv::Service as NamedService>::NAME {
                return Some(Box::new(Typed::<r2r::std_srvs::srv::$srv::Service>(PhantomData)));
            })*
            None
        }
    };
}

std_srvs!(Trigger, SetBool, Empty);

struct Typed<S>(PhantomData<fn() -> S>);

struct TypedCaller<S: WrappedServiceTypeSupport>(r2r::Client<S>);

impl<S: NamedService> Caller for TypedCaller<S>
where
    S::Request: Serialize + DeserializeOwned + Default + Send,
    S::Response: Serialize + DeserializeOwned + Default + Send,
{
    fn call(&self, request: Value) -> Result<Response, ConvertError> {
        let req: S::Request = plain_from_value(S::NAME, request)?;
        let fut = self.0.request(&req).map_err(|e| ConvertError::Ros(format!("calling {}: {e}", S::NAME)))?;
        Ok(async move {
            match fut.await {
                Ok(resp) => plain_to_value(S::NAME, &resp),
                Err(e) => Err(ConvertError::Ros(format!("{} call failed: {e}", S::NAME))),
            }
        }
        .boxed())
    }
}

struct TypedResponder<S: WrappedServiceTypeSupport>(r2r::ServiceRequest<S>);

impl<S: NamedService> Responder for TypedResponder<S>
where
    S::Request: Serialize + DeserializeOwned + Default + Send,
    S::Response: Serialize + DeserializeOwned + Default + Send,
{
    fn respond(self: Box<Self>, response: Value) -> Result<(), ConvertError> {
        let resp: S::Response = plain_from_value(S::NAME, response)?;
        self.0.respond(resp).map_err(|e| ConvertError::Ros(format!("responding to {}: {e}", S::NAME)))
    }
}

impl<S: NamedService> ServiceSupport for Typed<S>
where
    S::Request: Serialize + DeserializeOwned + Default + Send,
    S::Response: Serialize + DeserializeOwned + Default + Send,
{
    fn client(&self, node: &mut r2r::Node, service: &str) -> Result<Box<dyn Caller>, r2r::Error> {
        Ok(Box::new(TypedCaller(node.create_client::<S>(service, QosProfile::services_default())?)))
    }

    fn serve(&self, node: &mut r2r::Node, service: &str, mut sink: RequestSink) -> Result<LocalTask, r2r::Error> {
        let requests = node.create_service::<S>(service, QosProfile::services_default())?;
        Ok(Box::pin(requests.for_each(move |req| {
            let v = plain_to_value(S::NAME, &req.message);
            sink(v.map(|v| (v, Box::new(TypedResponder(req)) as Box<dyn Responder>)));
            std::future::ready(())
        })))
    }
}
