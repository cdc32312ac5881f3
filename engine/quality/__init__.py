"""Does memory keep the world consistent? Quality of the arena model's memory arms against the truth
(``worldpager bench quality``): leave-and-return episodes, the arms, retention with its bootstrap
interval, positions past the horizon, long-session drift, the figure and side-by-side videos."""
