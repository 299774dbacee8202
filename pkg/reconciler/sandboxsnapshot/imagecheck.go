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

package sandboxsnapshot

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
)

// imageChecks bounds the missing-image check's look-ups: each snapshot once
// per interval, starting one interval after it is first seen, and all of them
// image-checks-per-minute, a snapshot over that bound booking the next free
// slot. It lives in memory: a restart starts the intervals again.
type imageChecks struct {
	mu      sync.Mutex
	last    map[types.UID]time.Time
	booked  map[types.UID]time.Time
	limiter *rate.Limiter
}

func newImageChecks() *imageChecks {
	return &imageChecks{last: map[types.UID]time.Time{}, booked: map[types.UID]time.Time{}, limiter: rate.NewLimiter(rate.Inf, 1)}
}

// due reports whether uid may be checked at now, or how long to wait.
func (c *imageChecks) due(uid types.UID, now time.Time, interval time.Duration, perMinute int) (ok bool, wait time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.booked[uid]; ok {
		if now.Before(at) {
			return false, at.Sub(now)
		}
		delete(c.booked, uid)
		c.last[uid] = now
		return true, 0
	}
	last, seen := c.last[uid]
	if !seen {
		// Just pushed, or after a restart, when all would be looked up at once.
		c.last[uid] = now
		return false, interval
	}
	if now.Sub(last) < interval {
		return false, interval - now.Sub(last)
	}
	if limit := rate.Limit(float64(perMinute) / 60); c.limiter.Limit() != limit {
		c.limiter.SetLimitAt(now, limit)
	}
	if d := c.limiter.ReserveN(now, 1).DelayFrom(now); d > 0 {
		c.booked[uid] = now.Add(d)
		return false, d
	}
	c.last[uid] = now
	return true, 0
}

// forget drops what is known of a snapshot that is gone.
func (c *imageChecks) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.last, uid)
	delete(c.booked, uid)
}

// checkImages marks a Succeed snapshot's missing images with an event,
// ImageMissingAnnotation (kept under either CRD) and status.missingImages, not
// a condition: OpenSandbox's CRD allows no other.
func (r *Reconciler) checkImages(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	cfg := config.FromContext(ctx).Snapshot
	if cfg.ImageCheckInterval == 0 || s.Status.Phase != v1alpha1.PhaseSucceed {
		return nil
	}
	now := r.clock.Now()
	if ok, wait := r.checks.due(s.UID, now, cfg.ImageCheckInterval, cfg.ImageChecksPerMinute); !ok {
		return controller.NewRequeueAfter(wait)
	}
	again := controller.NewRequeueAfter(cfg.ImageCheckInterval)
	logger := logging.FromContext(ctx)
	opts := registry.NameOptions(cfg.InsecureRegistry)
	images, err := imagesOf(s, opts)
	if err != nil {
		logger.Warnw("Cannot check the images of a snapshot", zap.Error(err))
		return again
	}
	reg, err := r.registry(ctx, registry.Access{Secret: cfg.ControllerSecret(), CAConfigMap: cfg.RegistryCAConfigMap})
	if err != nil {
		logger.Warnw("Cannot check the images of a snapshot", zap.Error(err))
		return again
	}
	var missing []string
	for _, d := range images {
		digest, err := reg.Digest(ctx, d)
		if err != nil {
			logger.Warnw("Cannot look an image up", zap.Error(err))
			return again
		}
		if digest == "" {
			missing = append(missing, d.String())
		}
	}
	mark := strings.Join(missing, ",")
	if mark != s.Annotations[sandbox.ImageMissingAnnotation] {
		if err := r.patchAnnotation(ctx, s, sandbox.ImageMissingAnnotation, mark); err != nil {
			return err
		}
		recorder := controller.GetEventRecorder(ctx)
		if mark != "" {
			recorder.Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonImageMissing,
				"The registry no longer holds %s; the snapshot cannot be restored from it", strings.Join(missing, ", "))
		} else {
			recorder.Event(s, corev1.EventTypeNormal, v1alpha1.ReasonImageRestored, "The registry holds every image of the snapshot again")
		}
	}
	s.Status.MarkImagesMissing(missing)
	return again
}
