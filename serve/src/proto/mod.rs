//! The gRPC types and services, generated from `serve/proto/` by `serve/proto/generate.sh`
//! (protox and tonic-prost-build; checked in so that a build needs no protobuf compiler).
//! The module tree mirrors the protobuf packages, which the generated code's paths assume.
//! Public but hidden for the integration tests and the load generator, which use its clients.

#![allow(
    missing_docs,
    dead_code,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    rustdoc::all
)]

pub mod envoy {
    pub mod config {
        pub mod core {
            pub mod v3 {
                include!("envoy.config.core.v3.rs");
            }
        }
    }
    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    include!("envoy.extensions.common.ratelimit.v3.rs");
                }
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            include!("envoy.r#type.v3.rs");
        }
    }
    pub mod service {
        pub mod ratelimit {
            pub mod v3 {
                include!("envoy.service.ratelimit.v3.rs");
            }
        }
    }
}

pub mod slidegate {
    pub mod serve {
        pub mod v1 {
            include!("slidegate.serve.v1.rs");
        }
    }
}
