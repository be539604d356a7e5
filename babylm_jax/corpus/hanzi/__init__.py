"""What is known about a hanzi (readings, radical, structure), and the auxiliary heads' per-token labels."""
