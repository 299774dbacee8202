/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package upload

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// The registry retry policy, explicit rather than go-containerregistry's
// defaults (which also retry any error a registry labels UNKNOWN, such as a
// full disk, and wait 1 s then 3 s). go-containerregistry applies it at two
// levels: each HTTP request, and each whole blob or manifest upload; Chunked
// applies it to each request of a chunked upload.
var (
	// retryStatusCodes are the transient HTTP statuses: a registry or proxy
	// that is restarting, overloaded or rate limiting.
	retryStatusCodes = []int{
		http.StatusRequestTimeout,
		http.StatusTooManyRequests,
		http.StatusInternalServerError,
		http.StatusBadGateway,
		http.StatusServiceUnavailable,
		http.StatusGatewayTimeout,
	}
	// retryBackoff makes at most 4 attempts, 0.5 s, 1 s and 2 s apart, each
	// wait up to a tenth longer at random, so that the pushes a registry's
	// restart failed together do not retry together.
	retryBackoff = remote.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 4}
)

// isTransient decides which registry errors are retried: the statuses in
// retryStatusCodes, and a connection reset or cut short (EOF). Everything
// else fails at once: 401, 403, 404 (unknown repository or name), other
// statuses, refused connections, TLS and plain-HTTP refusals, and our own
// cancellation.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrPlainHTTPRefused) {
		return false
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		return slices.Contains(retryStatusCodes, terr.StatusCode)
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}
