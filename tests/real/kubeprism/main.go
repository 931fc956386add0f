// Command kubeprism runs Talos's KubePrism balancer, github.com/siderolabs/go-loadbalancer v0.5.0,
// configured exactly as Talos configures it, so the lab can put it beside readyprism.
//
// Every option below is Talos's, read at siderolabs/talos v1.13.9 (T13) and v1.14.0-rc.1 (T14):
// internal/app/machined/pkg/controllers/k8s/kubeprism.go, startKubePrism (T13 :190-211, T14 :190-212),
// with the values of pkg/machinery/constants/constants.go (T13 :1212-1227, T14 :1326-1341). Both tags
// pin go-loadbalancer v0.5.0 (go.mod T13 :149, T14 :152).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/siderolabs/go-loadbalancer/controlplane"
	"github.com/siderolabs/go-loadbalancer/upstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func main() {
	listen := flag.String("listen", "127.0.0.1", "listen host (Talos: kubeprism_config.go, 127.0.0.1)")
	port := flag.Int("port", 7445, "listen port (constants.DefaultKubePrismPort: T13 :1212, T14 :1326)")
	endpoints := flag.String("endpoints", "", "host:port,... in Talos's order: cluster endpoint, [localhost:<api port>], members")
	level := flag.String("log-level", "error", `"error" as Talos (kubeprism.go T13 :191, T14 :192); "debug" records health checks`)
	flag.Parse()
	if *endpoints == "" {
		fmt.Fprintln(os.Stderr, "kubeprism: --endpoints is required")
		os.Exit(2)
	}
	lvl, err := zapcore.ParseLevel(*level)
	check(err)
	logger := zap.Must(zap.NewProduction()).WithOptions(zap.IncreaseLevel(lvl))

	lb, err := controlplane.NewLoadBalancer(*listen, *port, logger,
		controlplane.WithDialTimeout(15*time.Second),     // KubePrismDialTimeout (T13 :1215, T14 :1329)
		controlplane.WithKeepAlivePeriod(30*time.Second), // KubePrismKeepAlivePeriod (T13 :1218, T14 :1332)
		controlplane.WithTCPUserTimeout(30*time.Second),  // KubePrismTCPUserTimeout (T13 :1221, T14 :1335)
		controlplane.WithHealthCheckOptions(
			upstream.WithHealthcheckInterval(20*time.Second), // KubePrismHealthCheckInterval (T13 :1224, T14 :1338)
			upstream.WithHealthcheckTimeout(15*time.Second),  // KubePrismHealthCheckTimeout (T13 :1227, T14 :1341)
		),
	)
	check(err)

	// Talos hands the endpoints over an unbuffered channel after Start (kubeprism.go T13 :204-211,
	// T14 :205-212): the first health round runs on an empty list.
	ch := make(chan []string)
	check(lb.Start(ch))
	ch <- strings.Split(*endpoints, ",")
	fmt.Printf("{\"t\":%.3f,\"event\":\"started\",\"endpoint\":%q}\n", now(), lb.Endpoint())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Talos polls Healthy() every 5 s for its KubePrismStatuses resource (kubeprism.go); the lab logs it.
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			check(lb.Shutdown())
			return
		case <-tick.C:
			ok, err := lb.Healthy()
			fmt.Printf("{\"t\":%.3f,\"healthy\":%v,\"error\":%q}\n", now(), ok, errString(err))
		}
	}
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeprism:", err)
		os.Exit(1)
	}
}
