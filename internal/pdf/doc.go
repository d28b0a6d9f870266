// Copyright 2014 The Go Authors.  All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

// Package pdf implements reading of PDF files.
//
// # Overview
//
// PDF is Adobe's Portable Document Format, ubiquitous on the internet.
// A PDF document is a complex data format built on a fairly simple structure.
// This package exposes the simple structure along with some wrappers to
// extract basic information. If more complex information is needed, it is
// possible to extract that information by interpreting the structure exposed
// by this package.
//
// Specifically, a PDF is a data structure built from Values, each of which has
// one of the following Kinds:
//
//	Null, for the null object.
//	Integer, for an integer.
//	Real, for a floating-point number.
//	Bool, for a boolean value.
//	Name, for a name constant (as in /Helvetica).
//	String, for a string constant.
//	Dict, for a dictionary of name-value pairs.
//	Array, for an array of values.
//	Stream, for an opaque data stream and associated header dictionary.
//
// The accessors on Value—Int64, Float64, Bool, Name, and so on—return
// a view of the data as the given type. When there is no appropriate view,
// the accessor returns a zero result. For example, the Name accessor returns
// the empty string if called on a Value v for which v.Kind() != Name.
// Returning zero values this way, especially from the Dict and Array accessors,
// which themselves return Values, makes it possible to traverse a PDF quickly
// without writing any error checking. On the other hand, it means that mistakes
// can go unreported.
//
// The basic structure of the PDF file is exposed as the graph of Values.
//
// Most richer data structures in a PDF file are dictionaries with specific interpretations
// of the name-value pairs. The Font and Page wrappers make the interpretation
// of a specific Value as the corresponding type easier. They are only helpers, though:
// they are implemented only in terms of the Value API and could be moved outside
// the package. Equally important, traversal of other PDF data structures can be implemented
// in other packages as needed.
//
// # This copy
//
// This package is a copy of github.com/ledongthuc/pdf (a fork of rsc.io/pdf) at
// commit 6c8c28e0e8a0, under its BSD license (LICENSE). The project copies it
// rather than requiring it because that reader decodes an object stream again
// from its start for every object it looks up in it, so the time a file costs
// grows with the square of its object streams' size: a 240 KB page of 100,000
// font names took more than 350 s of CPU (it was stopped there), against
// 0.4 s with this copy. No maintained pure-Go reader extracts text as well
// (pdfcpu extracts none). The changes:
//
//   - objstm.go decodes each object stream once, the first time an object in
//     it is looked up, and keeps it decoded, within the limits of
//     SetObjectStreamLimits; resolve (read.go) finds the objects of object
//     streams there. It also refuses an object stream inside an object stream
//     and a cycle of /Extends, which recursed or looped without end.
//   - newBufferBytes (lex.go) reads tokens from a decoded stream in place.
//   - recoverTo (page.go) keeps the error a panic carries, so that errors.Is
//     finds ErrLimit in what GetPlainText returns.
//
// Keep the rest as upstream has it, so that its fixes can be brought over by
// diff.
package pdf
