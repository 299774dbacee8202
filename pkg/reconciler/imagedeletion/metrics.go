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

package imagedeletion

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope (otel_scope_name) of the image
// deletion metrics.
const meterName = "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/imagedeletion"

// causeKey says why an image was left behind; its values are the cause*
// constants.
const causeKey = attribute.Key("cause")

// Why an image a record named was left in the registry.
const (
	// causeNotAnImage: the record names no image reference.
	causeNotAnImage = "not_an_image"
	// causeRestoreUnknown: the registry would not say whether a memory
	// snapshot's image restores from it.
	causeRestoreUnknown = "restore_unknown"
	// causeRefused: the registry refused the deletion.
	causeRefused = "refused"
	// causeTimedOut: deletion kept failing past image-deletion-timeout.
	causeTimedOut = "timed_out"
)

// newLeftBehind makes the counter of images left behind on meter.
func newLeftBehind(meter metric.Meter) (metric.Int64Counter, error) {
	return meter.Int64Counter("sandbox_snapshot_images_left_behind",
		metric.WithDescription("Images of deleted snapshots that image deletion (image-deletion-policy: Delete) gave up on and left in the registry, with an ImagesLeftBehind event"),
		metric.WithUnit("{image}"))
}
