package workers

// Idle is how many workers are parked (or about to park).
func (p *Pool) Idle() int { return int(p.idle.Load()) }
