"""The trainer's attempts as the supervisor runs them: launching each child process, how
it ended, when to restart it and what that cost, rollbacks, the warm spare and the cores
lent to the supervisor's own work."""
