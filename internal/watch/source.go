package watch

import (
	"context"
	"time"

	"github.com/ringxds/ringxds/internal/model"
)

// Source produces model states from some input.
type Source interface {
	// Run blocks until ctx is done or the source fails for good. It calls
	// publish with each new valid State, after coalescing bursts of input
	// changes. publish is never called concurrently.
	Run(ctx context.Context, publish func(model.State)) error
	// Problems returns the input errors currently in force, oldest first.
	// A problem disappears once its input is fixed or removed.
	Problems() []Problem
}

// Problem is an input error the source rejected while it kept serving the
// last good state.
type Problem struct {
	// Source is "file" or "kubernetes".
	Source string `json:"source"`
	// Object is the file path, or namespace/name of the Kubernetes object.
	Object string `json:"object"`
	// Field locates the problem: "line 12", an annotation key, or a field path.
	Field string `json:"field,omitempty"`
	// Message says what is wrong.
	Message string `json:"message"`
	// Since is when the problem was first seen.
	Since time.Time `json:"since"`
}
