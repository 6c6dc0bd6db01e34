//! The CM between two instances over an in-memory wire with a fake clock.

mod harness;

mod bounds;
mod capture;
mod connection;
mod duplicates;
mod malformed;
mod req_before_listen;
mod retries;
mod sidr;
mod wire_format;
