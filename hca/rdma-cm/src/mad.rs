//! The CM's wire format (IBTA 12.6 and 13.4): H2 owns it. Must provide, for hca/rdmacm:
//! [`ip_cm`] with the Annex A11 RDMA IP CM Service header.

pub mod ip_cm;
