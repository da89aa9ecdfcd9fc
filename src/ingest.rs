//! Parse → route → queue glue shared by every source. (work in progress)
