// Package mems3 owns an in-memory, versioned Amazon S3 server for the fast
// test tier: an http.Handler speaking S3's REST-XML protocol (path-style
// addressing) that the project's real code reaches through the real AWS SDK
// for Go v2, over an in-process transport instead of a socket.
//
// It exists so that the concurrent block protocol can be exercised quickly
// and deterministically while being held to the same behaviour as the
// emulator and real S3: versions and delete markers, conditional writes
// evaluated atomically with the write, flexible checksums (header and
// aws-chunked trailer framings), multipart uploads with S3's ETag and
// composite-checksum rules, S3's listing order and pagination, and event
// notifications with the bodies S3 sends to SQS, delivered in commit order.
//
// Every request is applied atomically under one mutex, which is never held
// while a request body is read or a notification is delivered. Identifiers
// (version ids, upload ids, request ids, event sequencers) come from
// per-server counters, so two servers fed the same requests in the same
// order hand out the same identifiers and have the same Digest.
package mems3
