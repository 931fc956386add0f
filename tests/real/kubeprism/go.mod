module readyprism.lab/real/kubeprism

go 1.26.0

require (
	github.com/siderolabs/go-loadbalancer v0.5.0
	go.uber.org/zap v1.27.0
)

require (
	github.com/siderolabs/gen v0.8.0 // indirect
	github.com/siderolabs/tcpproxy v0.1.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
