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

package test

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are the metric families of one scrape, by name. A series is
// named by its labels but OpenTelemetry's otel_scope_*, as key=value,...
// in key order.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads a scrape in Prometheus' text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(r)
}

// seriesLabels writes a series' labels as Metrics names them.
func seriesLabels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		if !strings.HasPrefix(l.GetName(), "otel_scope_") {
			parts = append(parts, l.GetName()+"="+l.GetValue())
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// Gauge returns the value of a gauge series, given as name or name{labels}.
func (m Metrics) Gauge(series string) (float64, error) {
	name, want, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	f, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("no metric %s", name)
	}
	for _, s := range f.GetMetric() {
		if seriesLabels(s) == want {
			return s.GetGauge().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("no series %s", series)
}

// Histogram returns the series of a histogram with exactly the given
// labels; an empty one when it has had no observation yet.
func (m Metrics) Histogram(t *testing.T, name, labels string) Histogram {
	t.Helper()
	f := m[name]
	if f != nil && f.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("%s is a %s, not a histogram", name, f.GetType())
	}
	for _, s := range f.GetMetric() {
		if seriesLabels(s) == labels {
			return Histogram{s.GetHistogram()}
		}
	}
	return Histogram{&dto.Histogram{}}
}

// Histogram is one series of a histogram.
type Histogram struct{ *dto.Histogram }

// Delta returns how many observations, and how much, h has over earlier.
func (h Histogram) Delta(earlier Histogram) (uint64, float64) {
	return h.GetSampleCount() - earlier.GetSampleCount(), h.GetSampleSum() - earlier.GetSampleSum()
}

// Bucket returns the cumulative count of bucket le, which must exist
// once h has observations.
func (h Histogram) Bucket(t *testing.T, le float64) uint64 {
	t.Helper()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	if h.GetSampleCount() > 0 {
		t.Fatalf("no bucket le=%g in %v", le, h.GetBucket())
	}
	return 0
}
