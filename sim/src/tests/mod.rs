//! Tests that drive the model through a mini-driver, as a driver would.

mod atomic;
mod breakers10;
mod breakers10b;
mod budget;
mod control;
mod counts;
mod cq_resize;
mod datapath;
mod hostile;
mod hostile13;
mod inline;

mod modify_values;
mod rdma;
mod retry;
mod roce;
mod srq;
mod ud;
