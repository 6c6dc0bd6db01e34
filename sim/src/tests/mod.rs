//! Tests that drive the model through a mini-driver, as a driver would.

mod atomic;
mod budget;
mod control;
mod counts;
mod cq_resize;
mod create_fields;
mod datapath;
mod gid_table;
mod gsi;
mod inline;
mod modify_refusals;
mod modify_values;
mod rdma;
mod registers;
mod retry;
mod roce;
mod srq;
mod ud;
mod untrusted_driver;
mod wqe_fields;
