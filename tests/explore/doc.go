// Package explore drives the real handlers of shared/pipeline through
// every schedule of a small scope — every order of deliveries, a crash
// before any write, a second delivery run to its end before any call of
// the first that it could conflict with, time passing while idle — and
// checks I1–I5 after every step.
//
// It runs on the in-memory tier only (localstack/memaws): every state is a
// snapshot of the services, the mailbox of the handlers' messages, the
// pending S3 notifications and a clock that moves only when the explorer
// moves it, so the search backtracks by restoring a snapshot instead of
// replaying a schedule from the start. A handler runs on its own goroutine
// and stops before each AWS call (gate.go) until the explorer lets it
// go on, so a schedule is a sequence of choices and replays exactly.
//
// The search is breadth first, so a violation comes with its shortest
// schedule and a search stopped by its budget has checked every schedule
// up to some length. Two reductions keep it small without losing a
// schedule that could end differently. States are hashed, with S3 version
// ids and lease owners renamed in order of appearance, and a state reached
// again with no more budget left is not explored again. Interleavings are tried only at
// calls that conflict (touch what the other delivery writes, or write
// what it touches); crashes only before writes and after the last call.
//
// A Mutant breaks one condition of the protocol on purpose; the explorer
// must catch it (TestExploreMutants), or its checks prove nothing.
//
// The scope, the figures and how to run a deeper search are in
// docs/proofs.md ("Exploring every schedule").
package explore
