// Package platformtest holds the tests of the local platform itself: that
// the emulator behind localstack/moto_serial.py gives a conditional write
// exactly one winner, and that localstack/start.sh and stop.sh start, find
// and stop exactly what they should. It has no code of its own.
package platformtest
