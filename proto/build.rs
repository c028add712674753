//! Compiles `tally/v1/*.proto` with protox (pure Rust, no system `protoc`),
//! generates the tonic client and server code, and writes the encoded file
//! descriptor set that the server's reflection service serves.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "tally/v1/common.proto",
        "tally/v1/ledger.proto",
        "tally/v1/job.proto",
        "tally/v1/operations.proto",
        "tally/v1/delivery.proto",
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={file}");
    }
    let fds = protox::compile(files, ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("tally_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
