// Package memsqs is an in-memory Amazon SQS server for Sluice's fast test
// tier. It speaks the AWS JSON 1.0 protocol that the AWS SDK for Go v2
// uses for SQS (POST /, X-Amz-Target: AmazonSQS.<Operation>), so the
// project's real code — the Lambda event-source emulation in
// shared/eventsource, the handlers in shared/pipeline, the CLI — runs
// unchanged against it, through the real SDK and an in-process
// http.RoundTripper, in milliseconds instead of against an emulator.
//
// The fast tier exists to prove a concurrent protocol correct, so memsqs
// is held to the same behaviour as the emulator and as SQS itself for
// everything Sluice relies on: FIFO group ordering and blocking,
// visibility timeouts, receipt-handle rules, deduplication, redrive to a
// dead-letter queue, retention, long polling, batch partial failures, the
// MD5 digests the SDK validates, and the typed errors the SDK decodes
// (the JSON __type together with the x-amzn-query-error header). Every
// request is applied atomically under one mutex; a long poll waits
// outside it.
//
// Runs are reproducible: every identifier it generates (MessageId,
// ReceiptHandle, SequenceNumber, request id) comes from a per-server
// counter, never from randomness or the clock, and all time-dependent
// behaviour reads Options.Clock, so a test can drive time by hand and
// compare two servers with Digest.
package memsqs
