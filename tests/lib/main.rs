//! Tests of the library's modules through their public API, one file per part, linked into
//! one test binary.

mod layers;
