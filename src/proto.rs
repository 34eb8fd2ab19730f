//! The CRI `runtime.v1` messages and services generated from `proto/`.

/// Package `runtime.v1`.
pub mod runtime {
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

pub use runtime::v1;

/// The encoded `FileDescriptorSet` of `proto/runtime/v1/api.proto`, for
/// reflection-driven tests and tools.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("cri_descriptor");
