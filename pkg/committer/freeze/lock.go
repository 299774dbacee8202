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

package freeze

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/grpc"
)

// ErrFrozenElsewhere marks errors returned, nothing touched, because another
// run holds the pod: a commit in flight, or a target paused without a marker.
var ErrFrozenElsewhere = errors.New("the pod is frozen by another run; nothing was paused, thawed or relabelled")

// lockRefPrefix names the containerd content ingest used as the pod's lock.
const lockRefPrefix = "sandbox-commit-lock-"

const lockRetryInterval = 250 * time.Millisecond

// Lock is a per-pod mutex in containerd: the content store locks an ingest ref
// while the Write stream that opened it is open. containerd ends the stream
// when the connection closes, so it dies with its holder, even on SIGKILL.
type Lock struct {
	store  content.Store
	ref    string
	stream contentapi.Content_WriteClient
	cancel context.CancelFunc
}

func (f *Freezer) lockRef() string {
	return lockRefPrefix + f.pod.UID
}

// TryLock takes the pod's lock or fails at once with ErrFrozenElsewhere.
func (f *Freezer) TryLock(ctx context.Context) (*Lock, error) {
	ref := f.lockRef()
	conn, ok := f.client.Conn().(*grpc.ClientConn)
	if !ok {
		return nil, fmt.Errorf("pod %s: the containerd client has no gRPC connection for the pod lock", f.pod)
	}
	// Outlive ctx: a signal cancels it while the handler still thaws.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := contentapi.NewContentClient(conn).Write(sctx)
	if err == nil {
		err = stream.Send(&contentapi.WriteContentRequest{Action: contentapi.WriteAction_STAT, Ref: ref})
	}
	if err == nil {
		// containerd locks the ref before it answers the first request.
		_, err = stream.Recv()
	}
	if err != nil {
		cancel()
		err = errgrpc.ToNative(err)
		if errdefs.IsUnavailable(err) {
			return nil, fmt.Errorf("pod %s: another sandbox-commit run of this pod is in flight (containerd lock %s: %v): %w",
				f.pod, ref, err, ErrFrozenElsewhere)
		}
		return nil, fmt.Errorf("pod %s: taking the containerd lock %s: %w", f.pod, ref, err)
	}
	return &Lock{store: f.client.ContentStore(), ref: ref, stream: stream, cancel: cancel}, nil
}

// waitLock takes the pod's lock, waiting while another run holds it.
func (f *Freezer) waitLock(ctx context.Context) (*Lock, error) {
	logged := false
	for {
		l, err := f.TryLock(ctx)
		if err == nil || !errors.Is(err, ErrFrozenElsewhere) {
			return l, err
		}
		if !logged {
			f.opts.Log.Printf("%v; waiting for it to finish", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pod %s: waiting for the containerd lock %s: %w", f.pod, f.lockRef(), ctx.Err())
		case <-time.After(lockRetryInterval):
		}
	}
}

// Release drops the ingest and returns once containerd has unlocked the ref.
func (l *Lock) Release(ctx context.Context) error {
	defer l.cancel()
	var errs []error
	if err := l.store.Abort(ctx, l.ref); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("removing ingest %s: %w", l.ref, err))
	}
	if err := l.stream.CloseSend(); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for {
		if _, err := l.stream.Recv(); err != nil {
			if err != io.EOF {
				errs = append(errs, fmt.Errorf("closing the lock stream %s: %w", l.ref, err))
			}
			return errors.Join(errs...)
		}
	}
}
