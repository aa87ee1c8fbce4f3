package server

import (
	"context"
	"errors"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"go.uber.org/zap"
)

// unservedCache holds watches for resource types ringxds does not publish.
// It never responds, which is what a client sees from a server that simply
// has no such resource.
type unservedCache struct{}

func (unservedCache) CreateWatch(*cache.Request, cache.Subscription, chan cache.Response) (func(), error) {
	return func() {}, nil
}

func (unservedCache) CreateDeltaWatch(*cache.DeltaRequest, cache.Subscription, chan cache.DeltaResponse) (func(), error) {
	return func() {}, nil
}

func (unservedCache) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("resource type not served by ringxds")
}

// cpLogger routes go-control-plane's stream logs into zap. Its per-request
// chatter stays at debug level.
type cpLogger struct{ s *zap.SugaredLogger }

func (l cpLogger) Debugf(format string, args ...any) { l.s.Debugf(format, args...) }
func (l cpLogger) Infof(format string, args ...any)  { l.s.Debugf(format, args...) }
func (l cpLogger) Warnf(format string, args ...any)  { l.s.Warnf(format, args...) }
func (l cpLogger) Errorf(format string, args ...any) { l.s.Errorf(format, args...) }
