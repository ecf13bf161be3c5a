DROP TABLE coordinators;
