//! The subscriptions on a topic, with their QoS: what the bridge's r2r
//! node cannot ask the ROS graph.
//!
//! r2r 0.9 lists a topic's publishers (`Node::get_publishers_info_by_topic`)
//! but not its subscriptions, and keeps the rcl handles of its nodes and
//! of its context private. rcl has the call
//! (`rcl_get_subscriptions_info_by_topic`), and r2r's rcl bindings, the
//! `r2r_rcl` crate, are public: [`GraphProbe`] makes the call on an rcl
//! node of its own, in an rcl context of its own. It has no endpoints and
//! lives only while the bridge checks the graph at start.

use std::ffi::{CStr, CString};

use r2r::QosProfile;
use r2r_rcl::*;

/// A subscription on the ROS graph.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub node_name: String,
    pub node_namespace: String,
    pub topic_type: String,
    pub qos: QosProfile,
}

/// An rcl context and node, for graph queries only.
pub struct GraphProbe {
    // Boxed: rcl keeps pointers to both.
    context: Box<rcl_context_t>,
    node: Box<rcl_node_t>,
}

/// An rcl failure: the call, r2r's name of the code, and rcl's message.
fn rcl_error(call: &str, ret: rcl_ret_t) -> String {
    // Safety: rcutils' thread-local error state, read then cleared.
    let message = unsafe {
        let e = rcutils_get_error_string();
        let text = CStr::from_ptr(e.str_.as_ptr()).to_string_lossy().into_owned();
        rcutils_reset_error();
        text
    };
    format!("{call} failed ({}): {message}", r2r::Error::from_rcl_error(ret))
}

/// A string rcl owns, copied.
///
/// Safety: `p` is null or a NUL-terminated string alive for the call.
unsafe fn owned(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl GraphProbe {
    /// A node `name` in `/`, in a context of its own (which reads
    /// `ROS_DOMAIN_ID` and the discovery settings from the environment,
    /// as r2r's does). Start it early: it discovers the graph from
    /// scratch, like any new participant.
    pub fn create(name: &str) -> Result<GraphProbe, String> {
        let c_name = CString::new(name).map_err(|_| format!("node name {name:?} has a NUL byte"))?;
        // Safety: rcl's documented init sequence on zero-initialized
        // structs; each is finalized on every failure path below, or by
        // `Drop` once complete.
        unsafe {
            let mut context = Box::new(rcl_get_zero_initialized_context());
            let mut init_options = rcl_get_zero_initialized_init_options();
            let ret = rcl_init_options_init(&mut init_options, rcutils_get_default_allocator());
            if ret != RCL_RET_OK as rcl_ret_t {
                return Err(rcl_error("rcl_init_options_init", ret));
            }
            // No arguments: the bridge's command line is not ROS's.
            let ret = rcl_init(0, std::ptr::null(), &init_options, context.as_mut());
            rcl_init_options_fini(&mut init_options);
            if ret != RCL_RET_OK as rcl_ret_t {
                let e = rcl_error("rcl_init", ret);
                rcl_context_fini(context.as_mut());
                return Err(e);
            }
            let mut node = Box::new(rcl_get_zero_initialized_node());
            // Global arguments stay on: the context has none (argc 0).
            let mut options = rcl_node_get_default_options();
            // No /rosout publisher: the probe has nothing to say.
            options.enable_rosout = false;
            let ret = rcl_node_init(node.as_mut(), c_name.as_ptr(), c"/".as_ptr(), context.as_mut(), &options);
            rcl_node_options_fini(&mut options);
            if ret != RCL_RET_OK as rcl_ret_t {
                let e = rcl_error("rcl_node_init", ret);
                rcl_shutdown(context.as_mut());
                rcl_context_fini(context.as_mut());
                return Err(e);
            }
            Ok(GraphProbe { context, node })
        }
    }

    /// The subscriptions on `topic` (a fully qualified name) that this
    /// probe has discovered so far.
    pub fn subscriptions(&self, topic: &str) -> Result<Vec<Endpoint>, String> {
        let c_topic = CString::new(topic).map_err(|_| format!("topic {topic:?} has a NUL byte"))?;
        // Safety: the node is initialized (`create`); the array is
        // zero-initialized, filled by rcl and finalized here on both paths.
        unsafe {
            let mut allocator = rcutils_get_default_allocator();
            let mut array = rmw_get_zero_initialized_topic_endpoint_info_array();
            let ret = rcl_get_subscriptions_info_by_topic(
                self.node.as_ref(),
                &mut allocator,
                c_topic.as_ptr(),
                false,
                &mut array,
            );
            if ret != RCL_RET_OK as rcl_ret_t {
                let e = rcl_error("rcl_get_subscriptions_info_by_topic", ret);
                rmw_topic_endpoint_info_array_fini(&mut array, &mut allocator);
                return Err(e);
            }
            let infos = if array.info_array.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(array.info_array, array.size)
            };
            let endpoints = infos
                .iter()
                .map(|i| Endpoint {
                    node_name: owned(i.node_name),
                    node_namespace: owned(i.node_namespace),
                    topic_type: owned(i.topic_type),
                    qos: QosProfile::from(i.qos_profile),
                })
                .collect();
            rmw_topic_endpoint_info_array_fini(&mut array, &mut allocator);
            Ok(endpoints)
        }
    }
}

impl Drop for GraphProbe {
    fn drop(&mut self) {
        // Safety: initialized by `create`, finalized once, node first.
        unsafe {
            rcl_node_fini(self.node.as_mut());
            rcl_shutdown(self.context.as_mut());
            rcl_context_fini(self.context.as_mut());
        }
    }
}
