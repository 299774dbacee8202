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
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// TestIsTransient pins the retry policy: which registry errors a push
// retries and which fail at once.
func TestIsTransient(t *testing.T) {
	urlErr := func(err error) error {
		return &url.Error{Op: "Put", URL: "http://127.0.0.1:5000/v2/x/manifests/1", Err: err}
	}
	regErr := func(status int, code transport.ErrorCode) error {
		e := &transport.Error{StatusCode: status}
		if code != "" {
			e.Errors = []transport.Diagnostic{{Code: code}}
		}
		return fmt.Errorf("uploading blob: %w", e)
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"500", regErr(500, ""), true},
		{"502", regErr(502, ""), true},
		{"503", regErr(503, transport.UnavailableErrorCode), true},
		{"504", regErr(504, ""), true},
		{"429", regErr(429, transport.TooManyRequestsErrorCode), true},
		{"408", regErr(408, ""), true},
		{"401", regErr(401, transport.UnauthorizedErrorCode), false},
		{"403", regErr(403, transport.DeniedErrorCode), false},
		{"404 name unknown", regErr(404, transport.NameUnknownErrorCode), false},
		{"404 blob upload unknown", regErr(404, transport.BlobUploadUnknownErrorCode), false},
		{"507 storage full labelled UNKNOWN", regErr(507, transport.UnknownErrorCode), false},
		{"400 manifest invalid", regErr(400, transport.ManifestInvalidErrorCode), false},
		{"connection reset", urlErr(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), true},
		{"broken pipe", urlErr(&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), true},
		{"EOF", urlErr(io.EOF), true},
		{"unexpected EOF", urlErr(io.ErrUnexpectedEOF), true},
		{"connection refused", urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), false},
		{"cancelled", urlErr(context.Canceled), false},
		{"deadline", urlErr(context.DeadlineExceeded), false},
		{"plain HTTP refused", urlErr(fmt.Errorf("%w (host x)", ErrPlainHTTPRefused)), false},
		{"other", errors.New("x509: certificate signed by unknown authority"), false},
	} {
		if got := isTransient(tc.err); got != tc.want {
			t.Errorf("%s: isTransient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
