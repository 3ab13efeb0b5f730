package grpclimit

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/internal/promtest"
	"github.com/floodgate-go/floodgate/observer/promobserver"
)

// TestPoliciesCountedPerPolicyInPrometheus: a call matching several
// policies, a dry-run one among them, is counted under each of them in a
// real Prometheus registry, through a real gRPC listener; the refusal names
// the policy that refused.
func TestPoliciesCountedPerPolicyInPrometheus(t *testing.T) {
	live := grpcLive(t)
	reg := prometheus.NewRegistry()
	obs, err := promobserver.New(reg)
	require.NoError(t, err)
	ic, err := Policies(live,
		WithDescriptor(PeerEntry("remote_address")),
		WithDescriptor(MethodEntry("method"), PeerEntry("remote_address")),
		WithObserver(obs))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	hc := healthpb.NewHealthClient(conn)

	// Each Check matches per-peer (10/m) and the dry-run policy shadow
	// (1/m): 12 calls, the last 2 refused by per-peer.
	var refused []string
	for range 12 {
		_, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{})
		if err != nil {
			require.Equal(t, codes.ResourceExhausted, status.Code(err))
			refused = append(refused, quotaSubjects(err)...)
		}
	}
	assert.Equal(t, []string{"policy:per-peer", "policy:per-peer"}, refused)

	got := promtest.Decisions(t, reg)
	want := map[string]float64{
		"request per-peer allowed": 10,
		"request per-peer denied":  2,
		"shadow shadow allowed":    1,
		"shadow shadow would_deny": 9, // the refused calls charge no dry-run policy
	}
	if !maps.Equal(got, want) {
		t.Fatalf("floodgate_decisions_total by source, policy and outcome:\n got %v\nwant %v", got, want)
	}
}
