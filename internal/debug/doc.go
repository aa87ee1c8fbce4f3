// Package debug serves the operator's view of ringxds over HTTP: the
// published resources, where a key goes, who is connected and whether they
// accepted their config, the input problems sources rejected, Prometheus
// metrics, and health probes.
//
// Everything here reads published state; nothing changes it. Answers are
// computed from the resources clients actually receive (decoded back into
// rings), not from the model, so /debug/pick shows what data planes do.
package debug
