// Command holdfast-backend-redis is holdfast's Redis backend plugin. The
// holdfast server runs it: holdfast serve --backend redis|PATH
// --backend-opt addrs=127.0.0.1:6379 (see the redis package for every option).
package main

import (
	"github.com/holdfast/holdfast/core/backend/backendserver"
	"github.com/holdfast/holdfast/plugins/redis"
)

func main() {
	backendserver.Serve(redis.Open)
}
